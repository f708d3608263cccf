#include <dblock/migrate.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/backend_factory.hpp"
#include "core/store_impl.hpp"
#include "core/uri.hpp"
#include "migrate/embedded_migrations.hpp"

namespace dblock {

namespace {

std::vector<detail::MigrationFile> migrations_for(std::string_view scheme) {
  std::string_view folder = scheme == "postgresql" ? "postgres" : scheme;
  std::vector<detail::MigrationFile> files;
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

std::vector<MigrationStatus> compare(const std::vector<detail::MigrationFile>& files,
                                     const std::vector<detail::AppliedMigration>& history) {
  std::map<int, MigrationStatus> by_version;
  for (auto& file : files)
    by_version[file.version] = {file.version, std::string(file.name), MigrationState::pending,
                                std::string(file.checksum), {}};
  for (auto& row : history) {
    auto& status = by_version[row.version];
    status.version = row.version;
    status.recorded_checksum = row.checksum;
    if (status.shipped_checksum.empty()) {
      status.name = row.name;
      status.state = MigrationState::unknown_newer;
    } else if (!row.success) {
      status.state = MigrationState::failed;
    } else {
      status.state = row.checksum == status.shipped_checksum ? MigrationState::applied : MigrationState::drifted;
    }
  }
  std::vector<MigrationStatus> out;
  for (auto& [version, status] : by_version) out.push_back(std::move(status));
  return out;
}

/// Throws for any state that must stop `up` (and fail `verify`), naming what to do.
void refuse_problems(const std::vector<MigrationStatus>& statuses, const std::string& where) {
  for (auto& status : statuses) {
    auto label = fmt::format("{:04d}_{}", status.version, status.name);
    switch (status.state) {
      case MigrationState::unknown_newer:
        throw SchemaError(SchemaError::Reason::newer,
                          fmt::format("{} has dblock migration {}, which this build does not know: upgrade dblock",
                                      where, label));
      case MigrationState::drifted:
        throw SchemaError(SchemaError::Reason::outdated,
                          fmt::format("dblock migration {} in {} was applied from a different file (checksum {} "
                                      "recorded, {} shipped): migrations must never be edited once released",
                                      label, where, status.recorded_checksum, status.shipped_checksum));
      case MigrationState::failed:
        throw SchemaError(SchemaError::Reason::outdated,
                          fmt::format("dblock migration {} in {} is recorded as failed: fix the cause, then run "
                                      "`dblock migrate repair` and `dblock migrate up`",
                                      label, where));
      default:
        break;
    }
  }
}

}  // namespace

std::string_view to_string(MigrationState state) noexcept {
  switch (state) {
    case MigrationState::applied: return "applied";
    case MigrationState::pending: return "pending";
    case MigrationState::drifted: return "drifted";
    case MigrationState::failed: return "failed";
    case MigrationState::unknown_newer: return "unknown-newer";
  }
  return "?";
}

int latest_schema_version() noexcept {
  int latest = 0;
  for (auto& embedded : detail::embedded_migrations()) latest = std::max(latest, embedded.file.version);
  return latest;
}

Migrator::Migrator(std::shared_ptr<Store> store, std::chrono::milliseconds lock_timeout)
    : store_(std::move(store)), lock_timeout_(lock_timeout) {
  if (!store_) throw InvalidArgument("Migrator needs a Store (got a null pointer)");
  if (lock_timeout_.count() <= 0) throw InvalidArgument("Migrator lock_timeout must be positive");
}

std::vector<MigrationStatus> Migrator::status() {
  auto& impl = detail::StoreAccess::impl(*store_);
  auto history = impl.backend->read_history();
  return compare(migrations_for(impl.uri.scheme), history.value_or(std::vector<detail::AppliedMigration>{}));
}

void Migrator::verify() { refuse_problems(status(), detail::StoreAccess::impl(*store_).uri.redacted); }

MigrationResult Migrator::up(std::optional<int> to) {
  auto& impl = detail::StoreAccess::impl(*store_);
  auto files = migrations_for(impl.uri.scheme);
  if (to && (*to < 1 || *to > latest_schema_version()))
    throw InvalidArgument(fmt::format("--to {} is not a version this build knows (1..{})", *to, latest_schema_version()));
  // Up to date already — the common case, at every start of every replica: no lock and no DDL,
  // so a role with only the runtime grants can run `up` (an init container's step).
  // Anything else (pending, failed, drifted) is decided under the lock: read without it, a MySQL
  // migration another replica is applying right now looks failed.
  if (auto history = impl.backend->read_history()) {
    auto statuses = compare(files, *history);
    bool current = std::all_of(statuses.begin(), statuses.end(), [&](const MigrationStatus& status) {
      return status.state == MigrationState::applied ||
             (status.state == MigrationState::pending && to && status.version > *to);
    });
    if (current) {
      MigrationResult result;
      for (auto& status : statuses)
        if (status.state == MigrationState::applied) result.current_version = status.version;
      return result;
    }
  }
  auto session = impl.backend->begin_migration(lock_timeout_);
  // Read only after taking the lock: another replica may have just applied what we would.
  auto statuses = compare(files, session->history());
  refuse_problems(statuses, impl.uri.redacted);

  MigrationResult result;
  for (auto& status : statuses)
    if (status.state == MigrationState::applied) result.current_version = status.version;
  auto who = applied_by();
  for (auto& file : files) {
    auto state = std::find_if(statuses.begin(), statuses.end(), [&](auto& s) { return s.version == file.version; });
    if (state->state != MigrationState::pending || (to && file.version > *to)) continue;
    impl.logger->info("applying dblock migration {:04d}_{} to {}", file.version, file.name, impl.uri.redacted);
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

std::vector<int> Migrator::repair() {
  auto& impl = detail::StoreAccess::impl(*store_);
  auto session = impl.backend->begin_migration(lock_timeout_);
  std::vector<int> cleared;
  // PostgreSQL and SQLite run each migration in one transaction, so a failed one left nothing
  // behind and its record can simply go; dialects with non-transactional DDL check each
  // statement's effect here before clearing.
  for (auto& row : session->history()) {
    if (row.success) continue;
    impl.logger->warn("clearing the failed record of dblock migration {:04d}_{}", row.version, row.name);
    session->forget(row.version);
    cleared.push_back(row.version);
  }
  session->finish();
  return cleared;
}

std::string Migrator::sql(std::string_view uri, std::optional<int> from, std::optional<int> to, StoreOptions options) {
  auto parsed = detail::resolve_store_uri(uri, options);
  auto files = migrations_for(parsed.scheme);
  std::erase_if(files, [&](auto& file) { return (from && file.version < *from) || (to && file.version > *to); });
  if (files.empty())
    throw InvalidArgument(fmt::format("no dblock migration between --from {} and --to {} (this build has 1..{})",
                                      from.value_or(1), to.value_or(latest_schema_version()), latest_schema_version()));
  return detail::render_migration_script(parsed, files);
}

MigrationResult migrate(Store& store, std::chrono::milliseconds lock_timeout) {
  return Migrator(store.shared_from_this(), lock_timeout).up();
}

}  // namespace dblock
