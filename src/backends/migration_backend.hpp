#pragma once
// The migration role of a backend: the history, the migration session under the database-level
// lock, the dialect's migration SQL, the live catalog for `verify` and foreign objects, and the
// rights a run needs.

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backends/dialect_bound.hpp"
#include "backends/migration_dialect.hpp"
#include "backends/schema_objects.hpp"
#include "base/migration_file.hpp"

namespace dblock::detail {

using std::chrono::milliseconds;

struct AppliedMigration {
  int version = 0;
  std::string name;
  std::string checksum;
  bool success = false;
};

/// A dedicated connection for one migration run, holding the database-level migration lock for as
/// long as it lives. It offers the steps; the protocol (what runs when, what a failure means) is the
/// migration engine's, in src/migrate.
class MigrationSession {
 public:
  virtual ~MigrationSession() = default;
  /// One non-blocking attempt at the database-level migration lock, held until the session ends;
  /// true when taken. The migrator polls it (never a blocking wait, which could deadlock with a
  /// concurrent DDL). Nothing else may be called before it returned true.
  virtual bool try_lock() = 0;
  /// Creates the schema and the history table when missing, then reads the history.
  virtual std::vector<AppliedMigration> history() = 0;
  /// Starts, ends and undoes one migration's transaction (by default nothing: where DDL commits by
  /// itself). undo_migration() may throw; the engine then still reports the migration's own error.
  virtual void begin_migration() {}
  virtual void commit_migration() {}
  virtual void undo_migration() {}
  /// Runs one statement of a migration (MigrationDialect::statements()).
  virtual void execute(const std::string& statement) = 0;
  /// Records `migration` as started (success false), replacing a record of it. Called only where
  /// DDL commits by itself (MigrationDialect::ddl_commits_itself()).
  virtual void record_started(const MigrationFile& migration, std::string_view applied_by) {
    (void)applied_by;
    throw std::logic_error("migration " + std::to_string(migration.version) +
                           ": DDL is transactional here, so nothing is recorded as started");
  }
  /// Records `migration` as applied, replacing a started record of it.
  virtual void record_applied(const MigrationFile& migration, std::string_view applied_by, milliseconds took) = 0;
  /// Deletes the history record of `version` (repair of a failed record).
  virtual void forget(int version) = 0;
  /// True where the whole run is one transaction (SQLite; PostgreSQL behind a transaction pooler):
  /// a failed migration then takes the run's earlier ones with it.
  [[nodiscard]] virtual bool one_transaction() const noexcept = 0;
  /// Makes the run durable where it is one transaction; without it, ending the session rolls the
  /// run back. Called once, after the last migration.
  virtual void finish() = 0;
};

class MigrationBackend : public virtual DialectBound {
 public:
  /// Read-only, takes no lock: the history, or empty when there is no history table yet.
  virtual std::optional<std::vector<AppliedMigration>> read_history() = 0;
  /// A session for one migration run on a connection of its own; the lock is taken with try_lock().
  virtual std::unique_ptr<MigrationSession> open_migration() = 0;
  /// This store's migration SQL (schema and prefix filled in).
  [[nodiscard]] virtual const MigrationDialect& migration_dialect() const = 0;
  /// Read-only: what the catalog holds under any of `names` in dblock's schema (PostgreSQL), database
  /// (MySQL) or file (SQLite): tables with their columns, sequences, indexes (MySQL: those of the
  /// tables named), functions and procedures with their bodies, triggers, views; any other relation
  /// as kind "other".
  virtual std::vector<CatalogObject> catalog(std::span<const std::string> names) = 0;
  /// Read-only, before `up` creates anything: the rights the connected role lacks to create
  /// `to_create`, to re-define `to_redefine` (objects that exist and the migrations define again)
  /// and to write the history table (which is in one of the two), each named as a DBA would grant
  /// it. Empty when nothing is missing, when the dialect has no roles, or when the database does
  /// not show every right the session has (nothing is refused on a guess).
  virtual std::vector<std::string> missing_migration_rights(std::span<const CatalogObject> to_create,
                                                            std::span<const CatalogObject> to_redefine) {
    (void)to_create;
    (void)to_redefine;
    return {};
  }
};

}  // namespace dblock::detail
