#pragma once
// The migration files, compiled in (cmake/EmbedMigrations.cmake generates the definition). Below
// core and migrate: the store checks its schema against the latest version, the migrator applies them.

#include <string_view>
#include <vector>

#include "base/migration_file.hpp"

namespace dblock::detail {

struct EmbeddedMigration {
  std::string_view dialect;  // folder under migrations/
  MigrationFile file;
};

/// Every migration of every dialect, in version order per dialect (generated at build time).
const std::vector<EmbeddedMigration>& embedded_migrations();

/// The migrations of one set (a folder under migrations/, as MigrationDialect::migration_set()
/// names it), in version order.
[[nodiscard]] std::vector<MigrationFile> migrations_of(std::string_view set);

}  // namespace dblock::detail
