#include "backends/postgres/pg_migration.hpp"

#include <array>

#include <fmt/format.h>

#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

/// Directly connected, the migration lock is a session lock and each migration commits on its own.
/// Behind a transaction pooler a session lock would stay on whichever server connection took it, so
/// the whole run is one transaction under a transaction-scoped lock, committed by finish().
class PgMigrationSession final : public MigrationSession {
 public:
  PgMigrationSession(std::unique_ptr<PgConnection> connection, const PgSql& sql, std::string schema,
                     std::string prefix, bool one_transaction)
      : connection_(std::move(connection)),
        sql_(sql),
        schema_(std::move(schema)),
        prefix_(std::move(prefix)),
        one_transaction_(one_transaction) {}

  bool try_lock() override {
    if (!one_transaction_) return text_of(connection_->exec(sql_.migration_lock).get(), 0, 0) == "t";
    connection_->exec("BEGIN");
    if (text_of(connection_->exec(sql_.migration_xact_lock).get(), 0, 0) == "t") return true;
    connection_->exec("ROLLBACK");
    return false;
  }

  std::vector<AppliedMigration> history() override {
    // CREATE SCHEMA needs the CREATE privilege on the database even when the schema exists: ask first.
    std::array<std::string, 1> schema{schema_};
    auto found = connection_->exec_params("SELECT 1 FROM pg_namespace WHERE nspname = $1", schema);
    if (PQntuples(found.get()) == 0) connection_->exec(fmt::format("CREATE SCHEMA \"{}\"", schema_));
    connection_->exec(sql_.history_table);
    return parse_history(connection_->exec(sql_.history).get());
  }

  void forget(int version) override {
    std::array<std::string, 1> params{std::to_string(version)};
    connection_->exec_params(sql_.forget, params);
  }

  void apply(const MigrationFile& migration, std::string_view applied_by) override {
    auto started = std::chrono::steady_clock::now();
    if (!one_transaction_) connection_->exec("BEGIN");
    try {
      connection_->exec(fill_placeholders(migration.sql, schema_, prefix_));
      auto elapsed = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started);
      std::array<std::string, 5> params{std::to_string(migration.version), std::string(migration.name),
                                        std::string(migration.checksum), std::string(applied_by),
                                        std::to_string(elapsed.count())};
      connection_->exec_params(sql_.record, params);
      if (!one_transaction_) connection_->exec("COMMIT");
    } catch (const Error& e) {
      if (PQstatus(connection_->raw()) == CONNECTION_OK) connection_->exec("ROLLBACK");
      throw DatabaseError(fmt::format("migration {:04d}_{} failed and was rolled back, nothing of it{} applied: {}",
                                      migration.version, migration.name,
                                      one_transaction_ ? " nor of this run" : "", e.what()),
                          e.sqlstate());
    }
  }

  void finish() override {
    if (one_transaction_) connection_->exec("COMMIT");
  }

 private:
  std::unique_ptr<PgConnection> connection_;
  const PgSql& sql_;
  std::string schema_;
  std::string prefix_;
  bool one_transaction_;
};

}  // namespace

std::unique_ptr<MigrationSession> make_pg_migration_session(std::unique_ptr<PgConnection> connection, const PgSql& sql,
                                                            std::string schema, std::string prefix,
                                                            bool one_transaction) {
  return std::make_unique<PgMigrationSession>(std::move(connection), sql, std::move(schema), std::move(prefix),
                                              one_transaction);
}

std::string render_postgres_migrations(const StoreUri& uri, std::span<const MigrationFile> migrations) {
  auto key = installation_key(uri.schema, uri.prefix);
  PgSql sql(uri.schema, uri.prefix, key, "");
  std::string script = fmt::format(
      "-- dblock migrations for PostgreSQL: schema \"{}\", table prefix \"{}\". Apply with\n"
      "--   psql -v ON_ERROR_STOP=1 -X -f THIS_FILE\n"
      "-- The history records make `dblock migrate status` recognise what was applied by hand.\n"
      "{};\n{};\n{};\n",
      uri.schema, uri.prefix, sql.migration_lock_blocking, sql.create_schema, sql.history_table);
  for (auto& migration : migrations) {
    // The same fill() `up` applies; name and checksum are [a-z0-9_] and hex, safe as literals.
    script += fmt::format(
        "\n-- {:04d}_{}\nBEGIN;\n{}\nINSERT INTO \"{}\".\"{}schema_history\" "
        "(version, name, checksum, applied_by, execution_ms, success)\nVALUES ({}, '{}', '{}', 'dblock migrate sql', 0, "
        "true);\nCOMMIT;\n",
        migration.version, migration.name, fill_placeholders(migration.sql, uri.schema, uri.prefix), uri.schema,
        uri.prefix, migration.version, migration.name, migration.checksum);
  }
  return script + fmt::format("\n{};\n", sql.migration_unlock);
}

}  // namespace dblock::detail
