#pragma once
// PostgreSQL's migration dialect: its migration SQL and script frame, and the steps of a migration
// session under the database-level lock.

#include <memory>
#include <string>

#include "backends/migration_backend.hpp"
#include "backends/postgres/pg_connection.hpp"
#include "backends/postgres/pg_sql.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

struct PgDatabase;

class PgMigrationDialect final : public MigrationDialect {
 public:
  explicit PgMigrationDialect(const StoreUri& uri);
  [[nodiscard]] Dialect dialect() const noexcept override { return Dialect::postgresql; }
  [[nodiscard]] std::string_view migration_set() const noexcept override { return "postgres"; }
  [[nodiscard]] std::string filled(std::string_view migration_sql) const override;
  [[nodiscard]] std::vector<std::string> statements(std::string_view migration_sql) const override;
  [[nodiscard]] std::string history_ddl() const override { return sql_.history_table; }
  [[nodiscard]] std::string script_record(const MigrationFile& migration) const override;
  [[nodiscard]] ScriptFrame script_frame() const override;
  [[nodiscard]] const CatalogRules& catalog_rules() const noexcept override;
  [[nodiscard]] std::string runtime_grants(std::span<const CatalogObject> objects,
                                           std::string_view role) const override;

 private:
  std::string schema_;
  std::string prefix_;
  StatementIds ids_;  // its own: of sql_ only texts are used here, none is prepared
  PgSql sql_;
};

/// A migration session on `connection`. `one_transaction`: behind a transaction pooler, the whole
/// run in one transaction under a transaction-scoped lock.
[[nodiscard]] std::unique_ptr<MigrationSession> make_pg_migration_session(std::unique_ptr<PgConnection> connection,
                                                                          const PgSql& sql, std::string schema,
                                                                          bool one_transaction);

/// The migration role on `database`, which must outlive it: the history and catalog read on its
/// pooled sessions, each migration run on a dedicated one.
[[nodiscard]] std::unique_ptr<MigrationBackend> make_pg_migrations(PgDatabase& database, const StoreUri& uri);

}  // namespace dblock::detail
