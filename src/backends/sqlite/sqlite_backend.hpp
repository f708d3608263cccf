#pragma once
#include <chrono>
#include <memory>
#include <span>
#include <string>

#include <spdlog/fwd.h>

#include "backends/backend.hpp"
#include "backends/backend_settings.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// SQLite through SOCI: the embedded default, for processes on one host sharing one file.
/// @throws ConnectionError when the file cannot be opened.
/// `connect_timeout` is the busy timeout: how long a statement waits for another process's write lock.
[[nodiscard]] std::unique_ptr<Backend> make_sqlite_backend(const StoreUri& uri, const BackendSettings& settings);

/// "SOCI 4.0.3, SQLite 3.40.1": the libraries this process runs with.
[[nodiscard]] std::string sqlite_driver_version();

}  // namespace dblock::detail
