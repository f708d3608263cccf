#pragma once
#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "backends/backend_settings.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// A PostgreSQL store on libpq: table mode, advisory mode and every other role (pg_backend.cpp
/// lists them). @throws ConnectionError when the first session fails.
[[nodiscard]] std::unique_ptr<Backend> make_postgres_backend(const StoreUri& uri, const BackendSettings& settings);

/// "libpq 15.18": the client library this process runs with.
[[nodiscard]] std::string postgres_driver_version();

}  // namespace dblock::detail
