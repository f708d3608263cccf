#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/backend_settings.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// The backend for the URI's scheme. @throws InvalidArgument for a scheme not built in,
/// ConnectionError when the first session cannot be opened.
[[nodiscard]] std::unique_ptr<Backend> make_backend(const StoreUri& uri, const BackendSettings& settings);

/// The backends built in, each with its scheme and driver versions, e.g. "postgresql (libpq 15.18)".
[[nodiscard]] std::vector<std::string> compiled_backends();

/// The URI's migration dialect, for `dblock migrate sql` and `grants` (MigrationDialect::runtime_grants).
/// Needs no connection.
[[nodiscard]] std::unique_ptr<MigrationDialect> make_migration_dialect(const StoreUri& uri);

}  // namespace dblock::detail
