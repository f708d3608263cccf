#include "backends/mysql/my_migration.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "backends/mysql/my_database.hpp"
#include "backends/mysql/my_rights.hpp"
#include "backends/mysql/my_script.hpp"
#include "backends/runtime_grants.hpp"
#include "base/ascii_text.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

class MyCatalogRules final : public CatalogRules {
 public:
  /// MySQL resolves routine names without case.
  bool same_name(const CatalogObject& a, const CatalogObject& b) const override {
    if (a.kind == "function" || a.kind == "procedure") return ascii_lower(a.name) == ascii_lower(b.name);
    return a.name == b.name;
  }
  bool takes_name(std::string_view planned, std::string_view live) const override {
    return ascii_lower(planned) == ascii_lower(live);
  }
  bool index_names_are_per_table() const noexcept override { return true; }
  std::optional<std::string> primary_key_index(std::string_view /*table*/) const override { return "PRIMARY"; }
  std::string type_name(std::string base, std::string size) const override {
    if (base == "boolean" || base == "bool") base = "tinyint";
    if (base == "integer") base = "int";
    static const std::array<std::string_view, 5> integers{"tinyint", "smallint", "mediumint", "int", "bigint"};
    if (std::find(integers.begin(), integers.end(), base) != integers.end()) size.clear();  // a display width
    return base + size;
  }
};

}  // namespace

std::string migration_lock_name(const StoreUri& uri, std::string_view database) {
  return fmt::format("{}.{}#migrate", database, uri.prefix);
}

MyMigrationDialect::MyMigrationDialect(std::string database, std::string prefix, bool galera)
    : database_(std::move(database)), prefix_(std::move(prefix)), galera_(galera), sql_(ids_, prefix_, galera) {}

std::string MyMigrationDialect::filled(std::string_view migration_sql) const {
  return fill_placeholders(migration_sql, "", prefix_);
}

std::vector<std::string> MyMigrationDialect::statements(std::string_view migration_sql) const {
  return split_mysql_script(filled(migration_sql));
}

std::string MyMigrationDialect::script_record(const MigrationFile& migration) const {
  return fmt::format(
      "INSERT INTO `{}schema_history` (version, name, checksum, applied_at, applied_by, execution_ms, "
      "success)\nVALUES ({}, '{}', '{}', UTC_TIMESTAMP(6), 'dblock migrate sql', 0, TRUE)",
      prefix_, migration.version, migration.name, migration.checksum);
}

ScriptFrame MyMigrationDialect::script_frame() const {
  // Statements end with $$ so that the client passes the function bodies' ';' to the server.
  return {.header = fmt::format("-- dblock migrations for {}: database `{}`, table prefix \"{}\". Apply with\n"
                                "--   mariadb --database={} < THIS_FILE      (or mysql)\n",
                                galera_ ? "a MariaDB Galera cluster" : "MySQL/MariaDB", database_, prefix_, database_),
          .opening = "DELIMITER $$\n",
          .preamble = {sql_.history_table},
          .closing = "DELIMITER ;\n",
          .terminator = "$$"};
}

namespace {

/// DDL commits on its own here: the engine records each migration as started before it runs.
class MyMigrationSession final : public MigrationSession {
 public:
  MyMigrationSession(std::unique_ptr<MyConnection> connection, const MySql& sql, const MyNamedLockSql& named_locks,
                     std::string lock_name)
      : connection_(std::move(connection)), sql_(sql), named_locks_(named_locks), lock_name_(std::move(lock_name)) {}

  bool try_lock() override {
    std::array<MyParam, 2> params{lock_name_, 0.0};
    return first_int64(connection_->query(named_locks_.lock_for(lock_name_), params)).has_value();
  }
  ~MyMigrationSession() override {
    try {
      std::array<MyParam, 1> params{lock_name_};
      connection_->query(named_locks_.unlock_for(lock_name_), params);
    } catch (...) {
      // The session closes next, which releases the lock too.
    }
  }
  MyMigrationSession(const MyMigrationSession&) = delete;
  MyMigrationSession& operator=(const MyMigrationSession&) = delete;

  std::vector<AppliedMigration> history() override {
    connection_->execute(sql_.history_table);
    return parse_history(connection_->query(sql_.history, {}));
  }

  void execute(const std::string& statement) override { connection_->execute(statement); }

  void record_started(const MigrationFile& migration, std::string_view applied_by) override {
    std::array<MyParam, 4> record{std::int64_t{migration.version}, migration.name, migration.checksum, applied_by};
    connection_->update(sql_.record_started, record);
  }
  void record_applied(const MigrationFile& migration, std::string_view, milliseconds took) override {
    std::array<MyParam, 2> done{std::int64_t{took.count()}, std::int64_t{migration.version}};
    connection_->update(sql_.record_done, done);  // completes the started record
  }

  void forget(int version) override {
    std::array<MyParam, 1> params{std::int64_t{version}};
    connection_->update(sql_.forget, params);
  }

  [[nodiscard]] bool one_transaction() const noexcept override { return false; }
  void finish() override {}

 private:
  std::unique_ptr<MyConnection> connection_;
  const MySql& sql_;
  const MyNamedLockSql& named_locks_;
  std::string lock_name_;
};

class MyMigrations final : public MigrationBackend {
 public:
  explicit MyMigrations(MyDatabase& db) : db_(db), migration_dialect_(db.endpoint.database, db.prefix, db.galera) {}

  Dialect dialect() const noexcept override { return Dialect::mysql; }

  std::optional<std::vector<AppliedMigration>> read_history() override {
    try {
      return parse_history(db_.pool.lease()->query(db_.sql.history, {}));
    } catch (const SchemaError&) {
      return std::nullopt;  // no history table yet
    }
  }

  std::vector<CatalogObject> catalog(std::span<const std::string> names) override {
    std::string joined;
    for (auto& name : names) joined += (joined.empty() ? "" : ",") + name;
    std::array<MyParam, 4> params{joined, joined, joined, joined};
    auto rows = db_.pool.lease()->query(db_.sql.catalog, params);
    std::vector<CatalogObject> objects;
    for (auto& row : rows)
      objects.push_back({row.str(1), row.str(0), row.str(2), split_list(row.str(3)), row.str(4), row.num(5) != 0,
                         split_list(row.str(6))});
    return objects;
  }

  std::vector<std::string> missing_migration_rights(std::span<const CatalogObject> to_create,
                                                    std::span<const CatalogObject> to_redefine) override {
    MyMigrationNeeds needs{.history = db_.prefix + "schema_history"};
    auto routine = [](const CatalogObject& object) { return object.kind == "function" || object.kind == "procedure"; };
    for (auto& object : to_create) {
      if (object.kind == "table" || object.kind == "sequence") needs.create_tables.push_back(object.name);
      if (routine(object)) needs.create_routines.push_back(object.name);
    }
    // Tables and sequences are created IF NOT EXISTS (a resumed migration): nothing to re-define,
    // but a column added by ALTER TABLE needs ALTER, whether the table exists yet or not.
    // Routines are created with CREATE OR REPLACE, which MariaDB lets run only with ALTER ROUTINE,
    // even for a routine that does not exist yet.
    for (auto& objects : {to_create, to_redefine})
      for (auto& object : objects) {
        if (routine(object)) needs.replace_routines.push_back(object.name);
        if (object.kind == "table" && object.adds_columns) needs.alter_tables.push_back(object.name);
      }
    std::vector<std::string> rows;
    for (auto& row : db_.pool.lease()->query(db_.sql.grants, {})) rows.push_back(row.str(0));
    return missing_mysql_migration_rights(rows, db_.endpoint.database, needs);
  }

  const MigrationDialect& migration_dialect() const override { return migration_dialect_; }

  std::unique_ptr<MigrationSession> open_migration() override {
    return std::make_unique<MyMigrationSession>(db_.connect(), db_.sql, db_.named_lock_sql, db_.migration_lock_name);
  }

 private:
  MyDatabase& db_;
  MyMigrationDialect migration_dialect_;
};

}  // namespace

std::unique_ptr<MigrationBackend> make_my_migrations(MyDatabase& database) {
  return std::make_unique<MyMigrations>(database);
}

const CatalogRules& MyMigrationDialect::catalog_rules() const noexcept {
  static const MyCatalogRules rules;
  return rules;
}

std::string MyMigrationDialect::runtime_grants(std::span<const CatalogObject> objects, std::string_view role) const {
  return mysql_runtime_grants(database_, prefix_, objects, role);
}

}  // namespace dblock::detail
