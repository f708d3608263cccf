// A tracing adapter: dblock's spans written as one JSON line each on stderr, the shape an
// exporter (OpenTelemetry's, Zipkin's) receives. Run: dblock_tracing_example [URI]
// (default: an SQLite file in /tmp). An OpenTelemetry adapter has the same four calls: see
// doc/metrics.md, "Tracing".

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <variant>

#include <fmt/format.h>
#include <dblock/dblock.hpp>
#include <dblock/tracing.hpp>

namespace {

long long unix_micros(std::chrono::system_clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::microseconds>(at.time_since_epoch()).count();
}

class JsonLineSpan final : public dblock::Span {
 public:
  JsonLineSpan(std::string name, std::chrono::system_clock::time_point start) : name_(std::move(name)), start_(start) {}
  void set_attribute(std::string_view key, dblock::SpanAttribute value) override {
    auto text = std::visit(
        [](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>)
            return dblock::json_string(v);
          else
            return fmt::format("{}", v);
        },
        value);
    attributes_ += fmt::format("{}{}:{}", attributes_.empty() ? "" : ",", dblock::json_string(key), text);
  }
  void set_error(std::string_view description) override { error_ = std::string(description); }
  void end(std::chrono::system_clock::time_point at) override {
    std::fprintf(stderr, "%s\n",
                 fmt::format("{{\"name\":{},\"kind\":\"client\",\"start_us\":{},\"end_us\":{},\"status\":{},"
                             "\"attributes\":{{{}}}}}",
                             dblock::json_string(name_), unix_micros(start_), unix_micros(at),
                             error_.empty() ? "\"ok\"" : dblock::json_string(error_), attributes_)
                     .c_str());
  }

 private:
  std::string name_;
  std::chrono::system_clock::time_point start_;
  std::string attributes_, error_;
};

class JsonLineTracer final : public dblock::Tracer {
 public:
  std::unique_ptr<dblock::Span> start_span(std::string_view name,
                                           std::chrono::system_clock::time_point start) override {
    return std::make_unique<JsonLineSpan>(std::string(name), start);
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  std::string uri = argc > 1 ? argv[1] : "sqlite:///tmp/dblock-tracing-example.db";
  auto store = dblock::Store::open(uri);
  dblock::migrate(*store);
  dblock::LockTracing tracing(std::make_shared<JsonLineTracer>(), dblock::TracingOptions::of(*store));
  dblock::LockManager locks(store, {.on_event = tracing.handler()});
  auto lock = locks.acquire("example/report", 5s);
  fmt::print("holding example/report with token {}\n", lock.token());
  lock.release();
  return 0;
}
