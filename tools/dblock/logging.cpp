#include "dblock/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>

#include <fmt/chrono.h>
#include <dblock/text.hpp>

namespace dblock::cli {

namespace {

/// %* : the message as `Render` shows it — a JSON string literal (json_string) or terminal-safe
/// text (terminal_safe), so a lock name can neither break a JSON record nor forge a line or send
/// escape sequences.
template <std::string (*Render)(std::string_view)>
class MessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    auto text = Render(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(text.data(), text.data() + text.size());
  }
  [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<MessageFlag>();
  }
};

constexpr const char* kJsonRecord = R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","logger":"%n","message":%*})";

}  // namespace

void Stderr::say(std::string_view level, std::string_view message) const {
  if (!json_) {
    fmt::print(stderr, "dblock: {}\n", terminal_safe(message));
    return;
  }
  // The same shape as a log record (kJsonRecord), written whatever the level filter.
  auto now = std::chrono::system_clock::now();
  auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  fmt::print(stderr,
             "{{\"time\":\"{:%Y-%m-%dT%H:%M:%S}.{:03}Z\",\"level\":\"{}\",\"logger\":\"dblock\",\"message\":{}}}\n",
             fmt::gmtime(std::chrono::system_clock::to_time_t(now)), millis, level, json_string(message));
}

std::shared_ptr<spdlog::logger> make_logger(const std::string& level, const std::string& format) {
  std::shared_ptr<spdlog::logger> logger;
  if (format == "json") {
    logger = std::make_shared<spdlog::logger>("dblock", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<MessageFlag<json_string>>('*').set_pattern(kJsonRecord);
    logger->set_formatter(std::move(formatter));
  } else {
    logger = std::make_shared<spdlog::logger>("dblock", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<MessageFlag<terminal_safe>>('*').set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %*");
    logger->set_formatter(std::move(formatter));
  }
  logger->set_level(spdlog::level::from_str(level));
  return logger;
}

}  // namespace dblock::cli
