#pragma once
// SQLite's migration role: its migration dialect (SQL and script frame), the migration session
// (the whole run in one BEGIN IMMEDIATE transaction), the history and the catalog.

#include <memory>
#include <string>
#include <vector>

#include "backends/migration_backend.hpp"
#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_session.hpp"

namespace dblock::detail {

/// The rows of SqliteSql::history.
[[nodiscard]] std::vector<AppliedMigration> read_history_rows(soci::session& session, const SqliteSql& sql);

class SqliteMigrationDialect final : public MigrationDialect {
 public:
  explicit SqliteMigrationDialect(std::string prefix);
  [[nodiscard]] Dialect dialect() const noexcept override { return Dialect::sqlite; }
  [[nodiscard]] std::string_view migration_set() const noexcept override { return "sqlite"; }
  [[nodiscard]] std::string filled(std::string_view migration_sql) const override;
  [[nodiscard]] std::vector<std::string> statements(std::string_view migration_sql) const override;
  [[nodiscard]] std::string history_ddl() const override { return sql_.history_table; }
  [[nodiscard]] std::string script_record(const MigrationFile& migration) const override;
  [[nodiscard]] ScriptFrame script_frame() const override;
  [[nodiscard]] const CatalogRules& catalog_rules() const noexcept override;
  /// SQLite has no roles: the text says so.
  [[nodiscard]] std::string runtime_grants(std::span<const CatalogObject> objects,
                                           std::string_view role) const override;

 private:
  std::string prefix_;
  SqliteSql sql_;
};

/// A migration session on `session`; its lock is the database's write lock (BEGIN IMMEDIATE).
[[nodiscard]] std::unique_ptr<MigrationSession> make_sqlite_migration_session(std::unique_ptr<SqliteSession> session,
                                                                              const SqliteSql& sql);

/// The migration role over `pool`'s sessions (and a dedicated one per run).
[[nodiscard]] std::unique_ptr<MigrationBackend> make_sqlite_migrations(SessionPool<SqliteSession>& pool,
                                                                       const SqliteSql& sql, std::string prefix);

}  // namespace dblock::detail
