#pragma once
// PostgreSQL's migration dialect: the migration session under the database-level lock, and the
// script `dblock migrate sql` prints.

#include <chrono>
#include <memory>
#include <span>
#include <string>

#include "backends/migration_backend.hpp"
#include "backends/postgres/pg_connection.hpp"
#include "backends/postgres/pg_sql.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// A migration session on `connection`. `one_transaction`: behind a transaction pooler, the whole
/// run in one transaction under a transaction-scoped lock.
[[nodiscard]] std::unique_ptr<MigrationSession> make_pg_migration_session(std::unique_ptr<PgConnection> connection,
                                                                          const PgSql& sql, std::string schema,
                                                                          std::string prefix, bool one_transaction);

/// The SQL `up` runs for `migrations` on an empty database, history records included, as a psql script.
[[nodiscard]] std::string render_postgres_migrations(const StoreUri& uri, std::span<const MigrationFile> migrations);

}  // namespace dblock::detail
