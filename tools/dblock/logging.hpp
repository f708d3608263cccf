#pragma once
#include <memory>
#include <string>

#include <spdlog/logger.h>

namespace dblock::cli {

/// The CLI's logger on stderr: "text" (human) or "json" (one object per line, for log shippers).
std::shared_ptr<spdlog::logger> make_logger(const std::string& level, const std::string& format);

}  // namespace dblock::cli
