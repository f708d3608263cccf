#include "dblock/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "core/json.hpp"

namespace dblock::cli {

namespace {

/// %* : the message as a JSON string literal (quotes and control characters escaped).
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    auto text = detail::json_string(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(text.data(), text.data() + text.size());
  }
  [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

std::shared_ptr<spdlog::logger> make_logger(const std::string& level, const std::string& format) {
  std::shared_ptr<spdlog::logger> logger;
  if (format == "json") {
    logger = std::make_shared<spdlog::logger>("dblock", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","logger":"%n","message":%*})");
    logger->set_formatter(std::move(formatter));
  } else {
    logger = std::make_shared<spdlog::logger>("dblock", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  }
  logger->set_level(spdlog::level::from_str(level));
  return logger;
}

}  // namespace dblock::cli
