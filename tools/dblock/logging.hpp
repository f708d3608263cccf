#pragma once
#include <memory>
#include <string>
#include <string_view>

#include <spdlog/logger.h>

namespace dblock::cli {

/// The CLI's logger on stderr: "text" (human; messages terminal-safe, one line each) or "json"
/// (one object per line, for log shippers).
std::shared_ptr<spdlog::logger> make_logger(const std::string& level, const std::string& format);

/// What dblock itself writes to stderr besides log records — the error that ends a command, `run`'s
/// reports on its command — always, whatever --log-level: "dblock: MESSAGE" with MESSAGE made
/// terminal-safe, or under --log-format json one object shaped like a log record.
class Stderr {
 public:
  explicit Stderr(bool json) : json_(json) {}
  /// `level`: "error", "warning" or "info".
  void say(std::string_view level, std::string_view message) const;

 private:
  bool json_;
};

}  // namespace dblock::cli
