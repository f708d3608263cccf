#include <dblock/migrate.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/store_impl.hpp"
#include "migrate/embedded_migrations.hpp"

namespace dblock {

namespace {

std::string migrations_folder(std::string_view dialect) {
  return dialect == "postgresql" ? "postgres" : std::string(dialect);
}

std::vector<detail::MigrationFile> migrations_for(std::string_view dialect) {
  std::vector<detail::MigrationFile> files;
  auto folder = migrations_folder(dialect);
  for (auto& embedded : detail::embedded_migrations())
    if (embedded.dialect == folder) files.push_back(embedded.file);
  std::sort(files.begin(), files.end(), [](auto& a, auto& b) { return a.version < b.version; });
  return files;
}

std::string applied_by() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  const char* user = getenv("USER");
  return fmt::format("{}@{} (dblock pid {})", user != nullptr ? user : "?", host.data(), getpid());
}

}  // namespace

int latest_schema_version() noexcept {
  int latest = 0;
  for (auto& embedded : detail::embedded_migrations()) latest = std::max(latest, embedded.file.version);
  return latest;
}

MigrationResult migrate(Store& store, std::chrono::milliseconds lock_timeout) {
  auto& impl = detail::StoreAccess::impl(store);
  auto& logger = *impl.logger;
  auto files = migrations_for(impl.backend->dialect());
  auto session = impl.backend->begin_migration(lock_timeout);
  // Read only after taking the lock: another replica may have just applied what we would.
  auto history = session->history();
  std::map<int, detail::AppliedMigration> applied;
  for (auto& row : history) applied.emplace(row.version, row);

  MigrationResult result;
  for (auto& [version, row] : applied) {
    auto known = std::find_if(files.begin(), files.end(), [&](auto& f) { return f.version == version; });
    if (known == files.end())
      throw SchemaError(SchemaError::Reason::newer,
                        fmt::format("{} has dblock migration {:04d}_{}, which this build does not know: upgrade dblock",
                                    impl.uri.redacted, version, row.name));
    if (row.checksum != known->checksum)
      throw SchemaError(SchemaError::Reason::outdated,
                        fmt::format("dblock migration {:04d}_{} in {} was applied from a different file (checksum {} "
                                    "recorded, {} shipped): migrations must never be edited once released",
                                    version, row.name, impl.uri.redacted, row.checksum, known->checksum));
    if (row.success) result.current_version = std::max(result.current_version, version);
  }
  auto who = applied_by();
  for (auto& file : files) {
    if (applied.contains(file.version)) continue;
    logger.info("applying dblock migration {:04d}_{} to {}", file.version, file.name, impl.uri.redacted);
    session->apply(file, who);
    result.applied.push_back(file.version);
    result.current_version = file.version;
  }
  session->finish();
  {
    std::lock_guard lock(impl.mutex);
    impl.schema_checked = false;  // the next check reads the new version
  }
  return result;
}

}  // namespace dblock
