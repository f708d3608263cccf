#include <dblock/migrate.hpp>

#include <algorithm>

#include "base/embedded_migrations.hpp"

namespace dblock {

int latest_schema_version() noexcept {
  int latest = 0;
  for (auto& embedded : detail::embedded_migrations()) latest = std::max(latest, embedded.file.version);
  return latest;
}

namespace detail {

std::vector<MigrationFile> migrations_of(std::string_view set) {
  std::vector<MigrationFile> files;
  for (auto& embedded : embedded_migrations())
    if (embedded.dialect == set) files.push_back(embedded.file);
  std::sort(files.begin(), files.end(), [](auto& a, auto& b) { return a.version < b.version; });
  return files;
}

}  // namespace detail

}  // namespace dblock
