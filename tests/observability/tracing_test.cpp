// Tracing hooks: the spans a manager's events become, with their times and attributes, through a
// recording Tracer (what an OpenTelemetry adapter receives).

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>
#include <dblock/tracing.hpp>

#include "observability/pg_fixture.hpp"
#include "support/eventually.hpp"

using namespace std::chrono_literals;
using dblock::test::eventually;

namespace {

struct Recorded {
  std::string name;
  std::chrono::system_clock::time_point start, end;
  std::map<std::string, dblock::SpanAttribute> attributes;
  std::string error;
  bool ended = false;
};

class RecordingTracer final : public dblock::Tracer {
 public:
  class RecordingSpan final : public dblock::Span {
   public:
    RecordingSpan(RecordingTracer& tracer, Recorded span) : tracer_(tracer), span_(std::move(span)) {}
    void set_attribute(std::string_view key, dblock::SpanAttribute value) override {
      span_.attributes[std::string(key)] = std::move(value);
    }
    void set_error(std::string_view description) override { span_.error = description; }
    void end(std::chrono::system_clock::time_point at) override {
      span_.end = at;
      span_.ended = true;
      std::lock_guard lock(tracer_.mutex_);
      tracer_.spans_.push_back(span_);
    }

   private:
    RecordingTracer& tracer_;
    Recorded span_;
  };

  std::unique_ptr<dblock::Span> start_span(std::string_view name,
                                           std::chrono::system_clock::time_point start) override {
    return std::make_unique<RecordingSpan>(*this, Recorded{std::string(name), start, {}, {}, {}, false});
  }
  std::vector<Recorded> named(const std::string& name) {
    std::lock_guard lock(mutex_);
    std::vector<Recorded> out;
    for (auto& span : spans_)
      if (span.name == name) out.push_back(span);
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<Recorded> spans_;
};

std::string text(const Recorded& span, const std::string& key) {
  auto it = span.attributes.find(key);
  return it == span.attributes.end() ? "<none>" : std::get<std::string>(it->second);
}
std::int64_t number(const Recorded& span, const std::string& key) {
  auto it = span.attributes.find(key);
  return it == span.attributes.end() ? -1 : std::get<std::int64_t>(it->second);
}

using Tracing = dblock::test::PgObservability;

TEST_F(Tracing, AcquireWaitRenewalReleaseAndLossBecomeSpansWithDatabaseClientAttributes) {
  auto tracer = std::make_shared<RecordingTracer>();
  dblock::LockTracing tracing(tracer, dblock::TracingOptions::of(*store_));
  dblock::LockManager locks(store_, {.default_ttl = 600ms, .on_event = tracing.handler()});
  dblock::LockManager other(store_);

  auto busy = other.try_acquire("trace/busy");
  ASSERT_TRUE(busy);
  EXPECT_THROW((void)locks.acquire("trace/busy", 150ms), dblock::Timeout);
  auto timeouts = tracer->named("dblock.acquire");
  ASSERT_EQ(timeouts.size(), 1u);
  EXPECT_EQ(text(timeouts[0], "dblock.acquire.outcome"), "timeout");
  EXPECT_EQ(text(timeouts[0], "error.type"), "timeout");
  EXPECT_FALSE(timeouts[0].error.empty());
  EXPECT_GE(timeouts[0].end - timeouts[0].start, 150ms) << "the span covers the wait";
  EXPECT_EQ(text(timeouts[0], "db.system.name"), "postgresql");
  EXPECT_EQ(text(timeouts[0], "db.operation.name"), "acquire");
  EXPECT_EQ(text(timeouts[0], "server.address"), "127.0.0.1");
  EXPECT_EQ(number(timeouts[0], "server.port"), dblock::test::dsn_port(server_dsn_));
  EXPECT_EQ(text(timeouts[0], "db.namespace"), "dblock");
  EXPECT_EQ(text(timeouts[0], "dblock.lock.name"), "trace/busy");

  auto held = locks.acquire("trace/held", 1s);
  auto held_token = held.token();
  ASSERT_TRUE(eventually([&] { return !tracer->named("dblock.renew").empty(); })) << "no renewal span";
  auto renew = tracer->named("dblock.renew").front();
  EXPECT_GE(number(renew, "dblock.renew.locks"), 1);
  EXPECT_GT(renew.end - renew.start, 0us) << "a renewal span lasts its statement";
  held.release();
  auto releases = tracer->named("dblock.release");
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(number(releases[0], "dblock.lock.token"), held_token);
  EXPECT_GE(number(releases[0], "dblock.lock.held_ms"), 0);

  auto doomed = locks.acquire("trace/doomed", 1s);
  auto doomed_token = doomed.token();
  ASSERT_TRUE(store_->force_release("trace/doomed"));
  ASSERT_TRUE(eventually([&] { return !tracer->named("dblock.lost").empty(); })) << "no loss span";
  auto lost = tracer->named("dblock.lost").front();
  EXPECT_EQ(text(lost, "error.type"), "dblock.lock_lost");
  EXPECT_EQ(number(lost, "dblock.lock.token"), doomed_token);
  EXPECT_EQ(lost.start, lost.end);
  EXPECT_THROW(doomed.release(), dblock::LockLost);
  EXPECT_EQ(tracer->named("dblock.lost").size(), 1u) << "a loss is one span, however it is found";

  auto granted = tracer->named("dblock.acquire");
  ASSERT_EQ(granted.size(), 3u);
  EXPECT_EQ(text(granted[1], "dblock.acquire.outcome"), "acquired");
  EXPECT_EQ(number(granted[1], "dblock.lock.depth"), 1);
  EXPECT_GT(granted[1].end - granted[1].start, 0us) << "a grant at the first try lasts its statement";
}

TEST_F(Tracing, LockNamesCanBeLeftOutOfSpans) {
  auto tracer = std::make_shared<RecordingTracer>();
  auto options = dblock::TracingOptions::of(*store_);
  options.lock_names = false;
  dblock::LockTracing tracing(tracer, options);
  dblock::LockManager locks(store_, {.on_event = tracing.handler()});
  locks.acquire("trace/secret", 1s).release();
  for (const auto* name : {"dblock.acquire", "dblock.release"}) {
    auto spans = tracer->named(name);
    ASSERT_EQ(spans.size(), 1u) << name;
    EXPECT_EQ(spans[0].attributes.count("dblock.lock.name"), 0u) << name;
  }
}

}  // namespace
