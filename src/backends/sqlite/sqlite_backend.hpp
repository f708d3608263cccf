#pragma once
#include <chrono>
#include <memory>
#include <span>
#include <string>

#include <spdlog/fwd.h>

#include "backends/backend.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// SQLite through SOCI: the embedded default, for processes on one host sharing one file.
/// @throws ConnectionError when the file cannot be opened.
[[nodiscard]] std::unique_ptr<Backend> make_sqlite_backend(const StoreUri& uri, std::chrono::milliseconds busy_timeout,
                                                           std::shared_ptr<spdlog::logger> logger);

/// "SOCI 4.0.3, SQLite 3.40.1": the libraries this process runs with.
[[nodiscard]] std::string sqlite_driver_version();

}  // namespace dblock::detail
