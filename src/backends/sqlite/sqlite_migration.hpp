#pragma once
// SQLite's migration dialect: the migration session (the whole run in one BEGIN IMMEDIATE
// transaction), the history, and the script `dblock migrate sql` prints.

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/migration_backend.hpp"
#include "backends/sqlite/sqlite_session.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// The rows of SqliteSql::history.
[[nodiscard]] std::vector<AppliedMigration> read_history_rows(soci::session& session, const SqliteSql& sql);

/// A migration session on `session`; its lock is the database's write lock (BEGIN IMMEDIATE).
[[nodiscard]] std::unique_ptr<MigrationSession> make_sqlite_migration_session(std::unique_ptr<SqliteSession> session,
                                                                              const SqliteSql& sql, std::string prefix);

/// The SQL `up` runs for `migrations` on an empty file, history records included, for `sqlite3`.
[[nodiscard]] std::string render_sqlite_migrations(const StoreUri& uri, std::span<const MigrationFile> migrations);

}  // namespace dblock::detail
