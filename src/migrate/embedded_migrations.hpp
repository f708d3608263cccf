#pragma once
#include <string_view>
#include <vector>

#include "backends/migration_backend.hpp"

namespace dblock::detail {

struct EmbeddedMigration {
  std::string_view dialect;  // folder under migrations/
  MigrationFile file;
};

/// Every migration of every dialect, in version order per dialect (generated at build time).
const std::vector<EmbeddedMigration>& embedded_migrations();

}  // namespace dblock::detail
