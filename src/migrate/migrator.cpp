#include <dblock/migrate.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/backend_factory.hpp"
#include "backends/migration_backend.hpp"
#include "base/embedded_migrations.hpp"
#include "base/uri.hpp"
#include "core/retry.hpp"
#include "core/store_parts.hpp"
#include "migrate/catalog_checks.hpp"
#include "migrate/history.hpp"
#include "migrate/migration_engine.hpp"
#include "migrate/migration_lock.hpp"

namespace dblock {

using detail::catalog_differences;
using detail::compare;
using detail::objects_of;
using detail::refuse_foreign_objects;
using detail::refuse_missing_rights;
using detail::refuse_problems;
using detail::resumable;
using detail::status_file;
using detail::status_of;

namespace {

std::vector<detail::MigrationFile> migrations_for(const detail::MigrationDialect& dialect) {
  return detail::migrations_of(dialect.migration_set());
}

std::string applied_by() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  const char* user = getenv("USER");
  return fmt::format("{}@{} (dblock pid {})", user != nullptr ? user : "?", host.data(), getpid());
}

}  // namespace

std::string_view to_string(MigrationState state) noexcept {
  switch (state) {
    case MigrationState::applied:
      return "applied";
    case MigrationState::pending:
      return "pending";
    case MigrationState::drifted:
      return "drifted";
    case MigrationState::failed:
      return "failed";
    case MigrationState::unknown_newer:
      return "unknown-newer";
  }
  return "?";
}

Migrator::Migrator(std::shared_ptr<Store> store, std::chrono::milliseconds lock_timeout)
    : store_(std::move(store)), lock_timeout_(lock_timeout) {
  if (!store_) throw InvalidArgument("Migrator needs a Store (got a null pointer)");
  if (lock_timeout_.count() <= 0) throw InvalidArgument("Migrator lock_timeout must be positive");
}

std::vector<MigrationStatus> Migrator::status() {
  detail::MigrationBackend& backend = detail::StoreParts::backend(*store_).migrations().get();
  auto history = detail::repeat_if_reply_lost([&] { return backend.read_history(); });
  return compare(migrations_for(backend.migration_dialect()),
                 history.value_or(std::vector<detail::AppliedMigration>{}));
}

void Migrator::verify() {
  detail::MigrationBackend& backend = detail::StoreParts::backend(*store_).migrations().get();
  auto& uri = detail::StoreParts::uri(*store_);
  auto statuses = status();
  refuse_problems(statuses, uri.redacted);
  auto files = migrations_for(backend.migration_dialect());
  auto expected = objects_of(backend.migration_dialect(), files, [&](int version) {
    return status_of(statuses, version).state == MigrationState::applied;
  });
  bool bodies_hidden = false;
  auto differences = catalog_differences(backend, expected, bodies_hidden);
  if (bodies_hidden)
    detail::StoreParts::logger(*store_)->warn(
        "{}: this role may not read the bodies of dblock's functions, so they were not compared; run "
        "`dblock migrate verify` as the role that owns them for the full check",
        uri.redacted);
  if (differences.empty()) return;
  std::string list;
  for (auto& difference : differences) list += (list.empty() ? "" : "; ") + difference;
  throw SchemaError(SchemaError::Reason::outdated,
                    fmt::format("dblock's objects in {} differ from what its applied migrations create: {}. Restore "
                                "them from `dblock migrate sql` (or drop and re-create an unused installation)",
                                uri.redacted, list));
}

MigrationResult Migrator::up(std::optional<int> to) {
  detail::MigrationBackend& backend = detail::StoreParts::backend(*store_).migrations().get();
  auto& uri = detail::StoreParts::uri(*store_);
  auto files = migrations_for(backend.migration_dialect());
  if (to && (*to < 1 || *to > latest_schema_version()))
    throw InvalidArgument(
        fmt::format("--to {} is not a version this build knows (1..{})", *to, latest_schema_version()));
  // Up to date already — the common case, at every start of every replica: no lock and no DDL,
  // so a role with only the runtime grants can run `up` (an init container's step).
  // Anything else (pending, failed, drifted) is decided under the lock: read without it, a MySQL
  // migration another replica is applying right now looks failed.
  // A history that cannot be read — a table under its name of another shape, or one the role may
  // not read (MySQL says so even of a table that does not exist) — is decided below, under the lock:
  // refused as a foreign object or for the rights missing, naming them.
  auto read_history = [&]() -> std::optional<std::vector<detail::AppliedMigration>> {
    try {
      return detail::repeat_if_reply_lost([&] { return backend.read_history(); });
    } catch (const DatabaseError&) {
      return std::nullopt;
    } catch (const PermissionDenied&) {
      return std::nullopt;
    }
  };
  auto history = read_history();
  // The result when `history` needs no work: nothing pending up to `to`, nothing failed or drifted.
  auto up_to_date = [&]() -> std::optional<MigrationResult> {
    if (!history) return std::nullopt;
    auto statuses = compare(files, *history);
    bool current = std::all_of(statuses.begin(), statuses.end(), [&](const MigrationStatus& status) {
      return status.state == MigrationState::applied ||
             (status.state == MigrationState::pending && to && status.version > *to);
    });
    if (!current) return std::nullopt;
    MigrationResult result;
    for (auto& status : statuses)
      if (status.state == MigrationState::applied) result.current_version = status.version;
    return result;
  };
  if (auto result = up_to_date()) return *result;
  bool resumes = backend.migration_dialect().ddl_commits_itself();
  auto session = backend.open_migration();
  detail::take_migration_lock(*session, lock_timeout_);
  // Under the lock (a concurrent `up` has finished, or left a record it can be told by) and before
  // anything is created, so that nothing of a refused run is left behind.
  history = read_history();
  if (auto result = up_to_date()) return *result;  // another replica's `up` did the work meanwhile
  auto recorded = compare(files, history.value_or(std::vector<detail::AppliedMigration>{}));
  refuse_foreign_objects(backend, files, recorded, resumes, uri.redacted);
  refuse_missing_rights(backend, files, recorded, resumes, uri.redacted);
  auto statuses = compare(files, session->history());
  refuse_problems(statuses, uri.redacted, resumes);

  MigrationResult result;
  for (auto& status : statuses)
    if (status.state == MigrationState::applied) result.current_version = status.version;
  auto who = applied_by();
  for (auto& file : files) {
    auto& state = status_of(statuses, file.version);
    bool resume = resumable(state, resumes);
    if ((state.state != MigrationState::pending && !resume) || (to && file.version > *to)) continue;
    detail::StoreParts::logger(*store_)->info("{} dblock migration {:04d}_{} to {}",
                                              resume ? "completing the broken-off" : "applying", file.version,
                                              file.name, uri.redacted);
    detail::apply_migration(*session, backend.migration_dialect(), file, who);
    result.applied.push_back(file.version);
    result.current_version = file.version;
  }
  session->finish();
  detail::StoreParts::schema_changed(*store_);  // the next check reads the new version
  return result;
}

std::vector<int> Migrator::repair() {
  detail::MigrationBackend& backend = detail::StoreParts::backend(*store_).migrations().get();
  auto files = migrations_for(backend.migration_dialect());
  bool resumes = backend.migration_dialect().ddl_commits_itself();
  auto session = backend.open_migration();
  detail::take_migration_lock(*session, lock_timeout_);
  std::vector<int> repaired;
  auto who = applied_by();
  // PostgreSQL and SQLite run each migration in one transaction, so a failed record left nothing
  // behind and can simply go (`up` runs the migration again). On MySQL a failed record may mean a
  // migration broken off part-way: it is completed (each statement is safe to run again) rather
  // than forgotten, since forgetting would leave its objects without a record.
  for (auto& status : compare(files, session->history())) {
    if (status.state != MigrationState::failed) continue;
    if (resumable(status, resumes)) {
      detail::StoreParts::logger(*store_)->warn("completing dblock migration {:04d}_{}, recorded as failed",
                                                status.version, status.name);
      detail::apply_migration(*session, backend.migration_dialect(), status_file(files, status.version), who);
    } else {
      detail::StoreParts::logger(*store_)->warn("clearing the failed record of dblock migration {:04d}_{}",
                                                status.version, status.name);
      session->forget(status.version);
    }
    repaired.push_back(status.version);
  }
  session->finish();
  detail::StoreParts::schema_changed(*store_);
  return repaired;
}

std::string Migrator::sql(std::string_view uri, std::optional<int> from, std::optional<int> to, StoreOptions options) {
  auto parsed = detail::resolve_store_uri(uri, options);
  auto dialect = detail::make_migration_dialect(parsed);
  auto files = migrations_for(*dialect);
  std::erase_if(files, [&](auto& file) { return (from && file.version < *from) || (to && file.version > *to); });
  if (files.empty())
    throw InvalidArgument(fmt::format("no dblock migration between --from {} and --to {} (this build has 1..{})",
                                      from.value_or(1), to.value_or(latest_schema_version()), latest_schema_version()));
  return detail::render_migration_script(*dialect, files);
}

std::string Migrator::grants(std::string_view uri, std::string_view role, StoreOptions options) {
  auto parsed = detail::resolve_store_uri(uri, options);
  auto dialect = detail::make_migration_dialect(parsed);
  auto objects = objects_of(*dialect, migrations_for(*dialect), [](int) { return true; });
  return dialect->runtime_grants(objects, role);
}

MigrationResult migrate(Store& store, std::chrono::milliseconds lock_timeout) {
  return Migrator(store.shared_from_this(), lock_timeout).up();
}

}  // namespace dblock
