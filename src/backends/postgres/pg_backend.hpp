#pragma once
#include <chrono>
#include <memory>
#include <string>

#include <spdlog/fwd.h>

#include "backends/backend.hpp"
#include "backends/backend_settings.hpp"
#include "backends/postgres/pg_xact_lock.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// PostgreSQL table mode on libpq. @throws ConnectionError when the first session fails.
[[nodiscard]] std::unique_ptr<Backend> make_postgres_backend(const StoreUri& uri, const BackendSettings& settings);

/// "libpq 15.18": the client library this process runs with.
[[nodiscard]] std::string postgres_driver_version();

}  // namespace dblock::detail
