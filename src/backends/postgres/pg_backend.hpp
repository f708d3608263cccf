#pragma once
#include <chrono>
#include <memory>
#include <span>
#include <string>

#include <spdlog/fwd.h>

#include "backends/backend.hpp"
#include "backends/backend_factory.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// PostgreSQL table mode on libpq. @throws ConnectionError when the first session fails.
[[nodiscard]] std::unique_ptr<Backend> make_postgres_backend(const StoreUri& uri, const BackendSettings& settings);

/// The SQL `up` runs for `migrations` on an empty database, history records included, as a script.
/// "libpq 15.18": the client library this process runs with.
[[nodiscard]] std::string postgres_driver_version();

[[nodiscard]] std::string render_postgres_migrations(const StoreUri& uri, std::span<const MigrationFile> migrations);

}  // namespace dblock::detail
