#include <dblock/migrate.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <array>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/backend_factory.hpp"
#include "core/store_parts.hpp"
#include "base/uri.hpp"
#include "migrate/embedded_migrations.hpp"

namespace dblock {

namespace {

std::vector<detail::MigrationFile> migrations_for(detail::Dialect dialect) {
  std::string_view folder = dialect == detail::Dialect::postgresql ? "postgres" : to_string(dialect);
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

/// A failed record `up` completes by itself: the dialect's DDL is not transactional, every statement
/// of its migrations is safe to run again, and the record is of the file this build ships.
bool resumable(const MigrationStatus& status, bool dialect_resumes) {
  return dialect_resumes && status.state == MigrationState::failed && status.recorded_checksum == status.shipped_checksum;
}

/// Throws for any state that must stop `up` (and fail `verify`), naming what to do; a failed record
/// `up` can complete passes when `dialect_resumes`.
void refuse_problems(const std::vector<MigrationStatus>& statuses, const std::string& where,
                     bool dialect_resumes = false) {
  for (auto& status : statuses) {
    if (resumable(status, dialect_resumes)) continue;
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
                                      "`dblock migrate up` (MySQL completes it) or `dblock migrate repair`",
                                      label, where));
      default:
        break;
    }
  }
}

std::string lowered(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Whether two catalog names are the same object's: MySQL resolves routine names without case.
bool same_name(detail::Dialect dialect, const detail::CatalogObject& a, const detail::CatalogObject& b) {
  if (dialect == detail::Dialect::mysql && (a.kind == "function" || a.kind == "procedure")) return lowered(a.name) == lowered(b.name);
  return a.name == b.name;
}

std::string describe(const detail::CatalogObject& object) {
  if (object.kind == "index" && !object.table.empty()) return fmt::format("index '{}' on '{}'", object.name, object.table);
  return fmt::format("{} '{}'", object.kind, object.name);
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) text.remove_suffix(1);
  return text;
}

std::vector<std::string> names_of(const std::vector<detail::CatalogObject>& objects) {
  std::vector<std::string> names;
  for (auto& object : objects) {
    names.push_back(object.name);
    if (!object.table.empty()) names.push_back(object.table);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

/// The history table as the migration session creates it.
detail::CatalogObject history_object(detail::MigrationBackend& backend) {
  return detail::objects_created_by(backend.history_ddl(), backend.dialect()).front();
}

/// What the history table and the migrations in `files` whose version `counts` leave in the catalog.
template <class Counts>
std::vector<detail::CatalogObject> objects_of(detail::MigrationBackend& backend, const std::vector<detail::MigrationFile>& files,
                                              Counts&& counts) {
  auto objects = detail::objects_created_by(backend.history_ddl(), backend.dialect());
  for (auto& file : files)
    if (counts(file.version)) merge_objects(objects, detail::objects_created_by(backend.filled(file.sql), backend.dialect()));
  return objects;
}

const detail::MigrationFile& status_file(const std::vector<detail::MigrationFile>& files, int version) {
  return *std::find_if(files.begin(), files.end(), [&](auto& f) { return f.version == version; });
}

const MigrationStatus& status_of(const std::vector<MigrationStatus>& statuses, int version) {
  return *std::find_if(statuses.begin(), statuses.end(), [&](auto& s) { return s.version == version; });
}

/// dblock never adopts what it did not create: before `up` creates anything, refuses when an
/// object under one of the names it would create already exists (a history table of another shape
/// included), naming each. Objects of migrations recorded as applied, or as started (MySQL, to be
/// completed), are dblock's.
void refuse_foreign_objects(detail::MigrationBackend& backend, const std::vector<detail::MigrationFile>& files,
                            const std::vector<MigrationStatus>& statuses, bool dialect_resumes, const std::string& where) {
  auto dialect = backend.dialect();
  auto history = history_object(backend);
  auto ours = objects_of(backend, files, [&](int version) {
    auto& status = status_of(statuses, version);
    return status.state == MigrationState::applied || resumable(status, dialect_resumes);
  });
  auto planned = objects_of(backend, files, [&](int version) { return status_of(statuses, version).state == MigrationState::pending; });
  std::vector<detail::CatalogObject> candidates;
  bool history_recorded = std::any_of(statuses.begin(), statuses.end(), [](auto& s) { return s.state != MigrationState::pending; });
  for (auto& object : planned) {
    if (object.kind == "index" && dialect == detail::Dialect::mysql) continue;  // index names are the table's own there
    bool is_history = object.kind == history.kind && object.name == history.name;
    if (is_history ? history_recorded
                   : std::any_of(ours.begin(), ours.end(), [&](auto& o) { return o.kind == object.kind && same_name(dialect, o, object); }))
      continue;
    candidates.push_back(object);
  }
  if (candidates.empty()) return;
  std::vector<std::string> names;
  for (auto& object : candidates) names.push_back(object.name);
  std::vector<std::string> foreign;
  for (auto& live : backend.catalog(names)) {
    if (live.kind == "index" && dialect == detail::Dialect::mysql) continue;
    auto planned_as = std::find_if(candidates.begin(), candidates.end(), [&](auto& o) { return lowered(o.name) == lowered(live.name) && (dialect == detail::Dialect::mysql || o.name == live.name); });
    if (planned_as == candidates.end()) continue;
    // The history table of an earlier, interrupted first run has exactly dblock's shape: ours.
    if (planned_as->name == history.name && live.kind == "table" && live.columns == history.columns) continue;
    foreign.push_back(describe(live));
  }
  if (foreign.empty()) return;
  std::string list;
  for (auto& item : foreign) list += (list.empty() ? "" : ", ") + item;
  throw SchemaError(SchemaError::Reason::outdated,
                    fmt::format("{} already has {} under the name(s) dblock's migrations create, not created by "
                                "dblock: dblock does not adopt or replace objects it did not create. Nothing was "
                                "changed. Rename or drop them, or give dblock a prefix= of its own",
                                where, list));
}

/// Refuses, before anything is created, a run the role lacks the rights for, naming each right:
/// without this a role that may create tables but not functions (say) would leave half a
/// migration behind on MySQL, whose DDL is not transactional.
void refuse_missing_rights(detail::MigrationBackend& backend, const std::vector<detail::MigrationFile>& files,
                           const std::vector<MigrationStatus>& statuses, bool dialect_resumes, const std::string& where) {
  auto dialect = backend.dialect();
  auto runs = objects_of(backend, files, [&](int version) {
    auto& status = status_of(statuses, version);
    return status.state == MigrationState::pending || resumable(status, dialect_resumes);
  });
  auto live = backend.catalog(names_of(runs));
  std::vector<detail::CatalogObject> to_create;
  std::vector<detail::CatalogObject> to_redefine;
  for (auto& object : runs) {
    bool exists = std::any_of(live.begin(), live.end(), [&](auto& have) { return have.kind == object.kind && same_name(dialect, have, object); });
    (exists ? to_redefine : to_create).push_back(object);
  }
  auto missing = backend.missing_migration_rights(to_create, to_redefine);
  if (missing.empty()) return;
  std::string list;
  for (auto& right : missing) list += (list.empty() ? "" : "; ") + right;
  throw PermissionDenied(fmt::format(
      "`dblock migrate up` cannot migrate {}: the role it connects as lacks {}. Nothing was changed. Grant those rights, or run "
      "`migrate up` as the role that owns dblock's objects (a runtime role needs only what `dblock migrate grants "
      "--role NAME` prints)",
      where, list));
}

/// Every difference between what the applied migrations create and the live catalog.
/// `bodies_hidden`: set when the catalog would not show this role a body to compare (MySQL shows a
/// routine's body only to its definer and to roles that may alter it).
std::vector<std::string> catalog_differences(detail::MigrationBackend& backend, const std::vector<detail::CatalogObject>& expected,
                                             bool& bodies_hidden) {
  auto dialect = backend.dialect();
  auto live = backend.catalog(names_of(expected));
  std::vector<std::string> differences;
  for (auto& want : expected) {
    std::vector<const detail::CatalogObject*> found;
    for (auto& have : live)
      if (have.kind == want.kind && same_name(dialect, have, want) && (want.kind != "index" || have.table == want.table))
        found.push_back(&have);
    if (found.empty()) {
      auto other = std::find_if(live.begin(), live.end(), [&](auto& have) { return same_name(dialect, have, want) && have.kind != want.kind && have.kind != "index"; });
      differences.push_back(other == live.end() ? fmt::format("{} is missing", describe(want))
                                                : fmt::format("{} is a {}", describe(want), other->kind));
      continue;
    }
    if (found.size() > 1) {
      differences.push_back(fmt::format("{} has {} definitions (an overload dblock did not create)", describe(want), found.size()));
      continue;
    }
    auto& have = *found.front();
    if (want.kind == "table" && have.columns != want.columns) {
      auto join = [](auto& columns) {
        std::string out;
        for (auto& column : columns) out += (out.empty() ? "" : ",") + column;
        return out;
      };
      differences.push_back(fmt::format("{} has columns ({}), dblock's migrations create ({})", describe(want),
                                        join(have.columns), join(want.columns)));
    }
    if (have.definition_hidden) {
      bodies_hidden = true;
      continue;
    }
    if (!want.definition.empty() && trimmed(have.definition) != trimmed(want.definition))
      differences.push_back(fmt::format("{} is not the one dblock's migrations install (its {} was replaced)",
                                        describe(want), want.kind == "trigger" ? "statement" : "body"));
  }
  // Indexes on dblock's tables that its migrations do not create (where the catalog lists them all).
  for (auto& have : live) {
    if (have.kind != "index") continue;
    bool known = std::any_of(expected.begin(), expected.end(), [&](auto& want) {
      return want.kind == "index" && want.name == have.name && want.table == have.table;
    });
    if (!known) differences.push_back(fmt::format("{} is not dblock's", describe(have)));
  }
  return differences;
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
  detail::MigrationBackend& backend = detail::StoreParts::backend(*store_);
  auto& uri = detail::StoreParts::uri(*store_);
  auto history = backend.read_history();
  return compare(migrations_for(uri.dialect), history.value_or(std::vector<detail::AppliedMigration>{}));
}

void Migrator::verify() {
  detail::MigrationBackend& backend = detail::StoreParts::backend(*store_);
  auto& uri = detail::StoreParts::uri(*store_);
  auto statuses = status();
  refuse_problems(statuses, uri.redacted);
  auto files = migrations_for(uri.dialect);
  auto expected = objects_of(backend, files, [&](int version) {
    return status_of(statuses, version).state == MigrationState::applied;
  });
  bool bodies_hidden = false;
  auto differences = catalog_differences(backend, expected, bodies_hidden);
  if (bodies_hidden)
    detail::StoreParts::logger(*store_)->warn("{}: this role may not read the bodies of dblock's functions, so they were not compared; run "
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
  detail::MigrationBackend& backend = detail::StoreParts::backend(*store_);
  auto& uri = detail::StoreParts::uri(*store_);
  auto files = migrations_for(uri.dialect);
  if (to && (*to < 1 || *to > latest_schema_version()))
    throw InvalidArgument(fmt::format("--to {} is not a version this build knows (1..{})", *to, latest_schema_version()));
  // Up to date already — the common case, at every start of every replica: no lock and no DDL,
  // so a role with only the runtime grants can run `up` (an init container's step).
  // Anything else (pending, failed, drifted) is decided under the lock: read without it, a MySQL
  // migration another replica is applying right now looks failed.
  // A history that cannot be read — a table under its name of another shape, or one the role may
  // not read (MySQL says so even of a table that does not exist) — is decided below, under the lock:
  // refused as a foreign object or for the rights missing, naming them.
  auto read_history = [&]() -> std::optional<std::vector<detail::AppliedMigration>> {
    try {
      return backend.read_history();
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
  bool resumes = backend.migrations_resume();
  auto session = backend.begin_migration(lock_timeout_);
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
    detail::StoreParts::logger(*store_)->info("{} dblock migration {:04d}_{} to {}", resume ? "completing the broken-off" : "applying",
                      file.version, file.name, uri.redacted);
    session->apply(file, who);
    result.applied.push_back(file.version);
    result.current_version = file.version;
  }
  session->finish();
  detail::StoreParts::schema_changed(*store_);  // the next check reads the new version
  return result;
}

std::vector<int> Migrator::repair() {
  detail::MigrationBackend& backend = detail::StoreParts::backend(*store_);
  auto& uri = detail::StoreParts::uri(*store_);
  auto files = migrations_for(uri.dialect);
  bool resumes = backend.migrations_resume();
  auto session = backend.begin_migration(lock_timeout_);
  std::vector<int> repaired;
  auto who = applied_by();
  // PostgreSQL and SQLite run each migration in one transaction, so a failed record left nothing
  // behind and can simply go (`up` runs the migration again). On MySQL a failed record may mean a
  // migration broken off part-way: it is completed (each statement is safe to run again) rather
  // than forgotten, since forgetting would leave its objects without a record.
  for (auto& status : compare(files, session->history())) {
    if (status.state != MigrationState::failed) continue;
    if (resumable(status, resumes)) {
      detail::StoreParts::logger(*store_)->warn("completing dblock migration {:04d}_{}, recorded as failed", status.version, status.name);
      session->apply(status_file(files, status.version), who);
    } else {
      detail::StoreParts::logger(*store_)->warn("clearing the failed record of dblock migration {:04d}_{}", status.version, status.name);
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
  auto files = migrations_for(parsed.dialect);
  std::erase_if(files, [&](auto& file) { return (from && file.version < *from) || (to && file.version > *to); });
  if (files.empty())
    throw InvalidArgument(fmt::format("no dblock migration between --from {} and --to {} (this build has 1..{})",
                                      from.value_or(1), to.value_or(latest_schema_version()), latest_schema_version()));
  return detail::render_migration_script(parsed, files);
}

std::string Migrator::grants(std::string_view uri, std::string_view role, StoreOptions options) {
  auto parsed = detail::resolve_store_uri(uri, options);
  return detail::render_runtime_grants(parsed, migrations_for(parsed.dialect), role);
}

MigrationResult migrate(Store& store, std::chrono::milliseconds lock_timeout) {
  return Migrator(store.shared_from_this(), lock_timeout).up();
}

}  // namespace dblock
