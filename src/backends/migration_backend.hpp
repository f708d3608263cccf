#pragma once
// The migration role of a backend: the history, the migration session under the database-level
// lock, the live catalog for `verify` and foreign objects, and the rights a run needs.

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/dialect_bound.hpp"
#include "backends/schema_objects.hpp"

namespace dblock::detail {

using std::chrono::milliseconds;

/// One embedded migration, placeholders not yet filled.
struct MigrationFile {
  int version = 0;
  std::string_view name;
  std::string_view checksum;  // SHA-256 of the file as shipped, hex
  std::string_view sql;
};

struct AppliedMigration {
  int version = 0;
  std::string name;
  std::string checksum;
  bool success = false;
};

/// Holds the database-level migration lock on a dedicated session for as long as it lives.
class MigrationSession {
 public:
  virtual ~MigrationSession() = default;
  /// One non-blocking attempt at the database-level migration lock, held until the session ends;
  /// true when taken. The migrator polls it (never a blocking wait, which could deadlock with a
  /// concurrent DDL). Nothing else may be called before it returned true.
  virtual bool try_lock() = 0;
  /// Creates the schema and the history table when missing, then reads the history.
  virtual std::vector<AppliedMigration> history() = 0;
  /// Runs one migration and records it in the history, in one transaction where the dialect allows.
  virtual void apply(const MigrationFile& migration, std::string_view applied_by) = 0;
  /// Deletes the history record of `version` (repair of a failed record).
  virtual void forget(int version) = 0;
  /// Makes the run durable where the dialect holds the whole run in one transaction (SQLite);
  /// without it, the destructor rolls back. Called once, after the last apply().
  virtual void finish() = 0;
};

class MigrationBackend : public virtual DialectBound {
 public:
  /// Read-only, takes no lock: the history, or empty when there is no history table yet.
  virtual std::optional<std::vector<AppliedMigration>> read_history() = 0;
  /// A session for one migration run on a connection of its own; the lock is taken with try_lock().
  virtual std::unique_ptr<MigrationSession> open_migration() = 0;
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
  /// Whether a migration recorded as failed may be completed by running it again: DDL is not
  /// transactional here (a failed record may mean "broken off part-way") and every statement of
  /// the shipped migrations is safe to run again.
  [[nodiscard]] virtual bool migrations_resume() const noexcept { return false; }
  /// A migration's SQL with this store's schema and prefix filled in, as `up` runs it.
  [[nodiscard]] virtual std::string filled(std::string_view migration_sql) const = 0;
  /// The history table's DDL, as the migration session runs it.
  [[nodiscard]] virtual std::string history_ddl() const = 0;
};

}  // namespace dblock::detail
