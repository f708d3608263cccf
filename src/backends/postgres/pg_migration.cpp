#include "backends/postgres/pg_migration.hpp"

#include <array>

#include <fmt/format.h>

#include "backends/postgres/pg_database.hpp"
#include "backends/runtime_grants.hpp"
#include "backends/schema_objects.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

class PgCatalogRules final : public CatalogRules {
 public:
  std::optional<std::string> primary_key_index(std::string_view table) const override {
    return std::string(table) + "_pkey";
  }
  /// A body sits between $fn$ markers (migrations/postgres keep to that quoting).
  std::string routine_body(std::string_view from_create) const override {
    auto open = from_create.find("$fn$");
    auto close = open == std::string_view::npos ? open : from_create.find("$fn$", open + 4);
    if (close == std::string_view::npos) return {};
    return std::string(from_create.substr(open + 4, close - open - 4));
  }
  std::string type_name(std::string base, std::string size) const override {
    static const std::array<std::pair<std::string_view, std::string_view>, 9> aliases{
        {{"timestamptz", "timestamp with time zone"},
         {"timestamp", "timestamp without time zone"},
         {"int", "integer"},
         {"int4", "integer"},
         {"int8", "bigint"},
         {"int2", "smallint"},
         {"bool", "boolean"},
         {"varchar", "character varying"},
         {"char", "character"}}};
    for (auto& [alias, name] : aliases)
      if (base == alias) base = name;
    return base + size;
  }
  bool default_collation(std::string_view collation) const noexcept override { return collation == "default"; }
};

}  // namespace

PgMigrationDialect::PgMigrationDialect(const StoreUri& uri)
    : schema_(uri.schema),
      prefix_(uri.prefix),
      sql_(ids_, uri.schema, uri.prefix, installation_key(uri.schema, uri.prefix), "") {}

std::string PgMigrationDialect::filled(std::string_view migration_sql) const {
  return fill_placeholders(migration_sql, schema_, prefix_);
}

std::vector<std::string> PgMigrationDialect::statements(std::string_view migration_sql) const {
  return {as_one_statement(filled(migration_sql))};  // the simple query protocol runs them all
}

std::string PgMigrationDialect::script_record(const MigrationFile& migration) const {
  return fmt::format(
      "INSERT INTO \"{}\".\"{}schema_history\" (version, name, checksum, applied_by, execution_ms, "
      "success)\nVALUES ({}, '{}', '{}', 'dblock migrate sql', 0, true)",
      schema_, prefix_, migration.version, migration.name, migration.checksum);
}

ScriptFrame PgMigrationDialect::script_frame() const {
  return {.header = fmt::format("-- dblock migrations for PostgreSQL: schema \"{}\", table prefix \"{}\". Apply with\n"
                                "--   psql -v ON_ERROR_STOP=1 -X -f THIS_FILE\n",
                                schema_, prefix_),
          .preamble = {sql_.migration_lock_blocking, sql_.create_schema, sql_.history_table},
          .epilogue = {sql_.migration_unlock},
          .transaction_per_migration = true};
}

namespace {

/// Directly connected, the migration lock is a session lock and each migration commits on its own.
/// Behind a transaction pooler a session lock would stay on whichever server connection took it, so
/// the whole run is one transaction under a transaction-scoped lock, committed by finish().
class PgMigrationSession final : public MigrationSession {
 public:
  PgMigrationSession(std::unique_ptr<PgConnection> connection, const PgSql& sql, std::string schema,
                     bool one_transaction)
      : connection_(std::move(connection)), sql_(sql), schema_(std::move(schema)), one_transaction_(one_transaction) {}

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

  void begin_migration() override {
    if (!one_transaction_) connection_->exec("BEGIN");
  }
  void commit_migration() override {
    if (!one_transaction_) connection_->exec("COMMIT");
  }
  void undo_migration() override {
    if (PQstatus(connection_->raw()) == CONNECTION_OK) connection_->exec("ROLLBACK");
  }
  void execute(const std::string& statement) override { connection_->exec(statement); }

  void record_applied(const MigrationFile& migration, std::string_view applied_by, milliseconds took) override {
    std::array<std::string, 5> params{std::to_string(migration.version), std::string(migration.name),
                                      std::string(migration.checksum), std::string(applied_by),
                                      std::to_string(took.count())};
    connection_->exec_params(sql_.record, params);
  }

  void forget(int version) override {
    std::array<std::string, 1> params{std::to_string(version)};
    connection_->exec_params(sql_.forget, params);
  }

  [[nodiscard]] bool one_transaction() const noexcept override { return one_transaction_; }
  void finish() override {
    if (one_transaction_) connection_->exec("COMMIT");
  }

 private:
  std::unique_ptr<PgConnection> connection_;
  const PgSql& sql_;
  std::string schema_;
  bool one_transaction_;
};

}  // namespace

std::unique_ptr<MigrationSession> make_pg_migration_session(std::unique_ptr<PgConnection> connection, const PgSql& sql,
                                                            std::string schema, bool one_transaction) {
  return std::make_unique<PgMigrationSession>(std::move(connection), sql, std::move(schema), one_transaction);
}

const CatalogRules& PgMigrationDialect::catalog_rules() const noexcept {
  static const PgCatalogRules rules;
  return rules;
}

std::string PgMigrationDialect::runtime_grants(std::span<const CatalogObject> objects, std::string_view role) const {
  return postgres_runtime_grants(schema_, prefix_, objects, role);
}

namespace {

class PgMigrations final : public MigrationBackend {
 public:
  PgMigrations(PgDatabase& database, const StoreUri& uri) : database_(database), dialect_(uri) {}

  Dialect dialect() const noexcept override { return Dialect::postgresql; }
  const MigrationDialect& migration_dialect() const override { return dialect_; }

  std::optional<std::vector<AppliedMigration>> read_history() override {
    try {
      auto result = database_.pool.lease()->exec(database_.sql.history);
      return parse_history(result.get());
    } catch (const SchemaError&) {
      return std::nullopt;  // no history table (or schema) yet
    }
  }

  std::vector<CatalogObject> catalog(std::span<const std::string> names) override {
    std::vector<std::string_view> views(names.begin(), names.end());
    std::array<std::string, 2> params{database_.schema, pg_text_array(views)};
    auto result = database_.pool.lease()->exec_params(database_.sql.catalog, params);
    std::vector<CatalogObject> objects;
    for (int row = 0; row < PQntuples(result.get()); ++row)
      objects.push_back({text_of(result.get(), row, 1), text_of(result.get(), row, 0), text_of(result.get(), row, 2),
                         split_list(text_of(result.get(), row, 3)), text_of(result.get(), row, 4), false,
                         split_list(text_of(result.get(), row, 5))});
    return objects;
  }

  std::vector<std::string> missing_migration_rights(std::span<const CatalogObject> to_create,
                                                    std::span<const CatalogObject> to_redefine) override {
    (void)to_create;  // whatever is created needs CREATE on the schema, which is always asked
    std::vector<std::string_view> redefined;
    for (auto& object : to_redefine) redefined.push_back(object.name);
    std::array<std::string, 2> params{database_.schema, pg_text_array(redefined)};
    auto result = database_.pool.lease()->exec_params(database_.sql.migration_rights, params);
    std::vector<std::string> missing;
    for (int row = 0; row < PQntuples(result.get()); ++row) missing.push_back(text_of(result.get(), row, 0));
    return missing;
  }

  std::unique_ptr<MigrationSession> open_migration() override {
    return make_pg_migration_session(database_.pool.connect_dedicated(), database_.sql, database_.schema,
                                     database_.behind_transaction_pooler());
  }

 private:
  PgDatabase& database_;
  PgMigrationDialect dialect_;
};

}  // namespace

std::unique_ptr<MigrationBackend> make_pg_migrations(PgDatabase& database, const StoreUri& uri) {
  return std::make_unique<PgMigrations>(database, uri);
}

}  // namespace dblock::detail
