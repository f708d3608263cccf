#include "backends/mysql/my_migration.hpp"

#include <array>

#include <fmt/format.h>

#include "backends/mysql/my_script.hpp"

namespace dblock::detail {

std::string migration_lock_name(const StoreUri& uri, std::string_view database) {
  return fmt::format("{}.{}#migrate", database, uri.prefix);
}

namespace {

class MyMigrationSession final : public MigrationSession {
 public:
  MyMigrationSession(std::unique_ptr<MyConnection> connection, const MySql& sql, std::string lock_name,
                     std::string prefix)
      : connection_(std::move(connection)), sql_(sql), lock_name_(std::move(lock_name)), prefix_(std::move(prefix)) {}

  bool try_lock() override {
    std::array<MyParam, 5> params{lock_name_, lock_name_, lock_name_, lock_name_, std::int64_t{0}};
    return first_int64(connection_->query(sql_.migration_lock, params)) == 1;
  }
  ~MyMigrationSession() override {
    try {
      std::array<MyParam, 4> params{lock_name_, lock_name_, lock_name_, lock_name_};
      connection_->query(sql_.migration_unlock, params);
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

  void forget(int version) override {
    std::array<MyParam, 1> params{std::int64_t{version}};
    connection_->update(sql_.forget, params);
  }

  /// DDL commits on its own here, so a migration cannot be rolled back: it is recorded as failed
  /// before it starts and as applied once every statement ran. One that breaks off part-way stays
  /// recorded as failed, and the next `up` (from any replica) or `repair` runs it again, which
  /// completes it: every statement of the shipped migrations is safe to run again, and `up` has
  /// checked before the first run that none of their names belonged to anything else.
  void apply(const MigrationFile& migration, std::string_view applied_by) override {
    auto started = std::chrono::steady_clock::now();
    std::array<MyParam, 4> record{std::int64_t{migration.version}, migration.name, migration.checksum, applied_by};
    connection_->update(sql_.record_started, record);
    try {
      for (auto& statement : split_mysql_script(fill_placeholders(migration.sql, "", prefix_)))
        connection_->execute(statement);
    } catch (const Error& e) {
      throw DatabaseError(fmt::format("migration {:04d}_{} failed part-way and is recorded as failed (MySQL cannot "
                                      "roll back DDL; its statements are safe to run again): {}. Fix the cause, then "
                                      "run `dblock migrate up` again: it completes the migration",
                                      migration.version, migration.name, e.what()),
                          e.sqlstate());
    }
    auto elapsed = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started);
    std::array<MyParam, 2> done{std::int64_t{elapsed.count()}, std::int64_t{migration.version}};
    connection_->update(sql_.record_done, done);
  }

  void finish() override {}

 private:
  std::unique_ptr<MyConnection> connection_;
  const MySql& sql_;
  std::string lock_name_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<MigrationSession> make_my_migration_session(std::unique_ptr<MyConnection> connection, const MySql& sql,
                                                            std::string lock_name, std::string prefix) {
  return std::make_unique<MyMigrationSession>(std::move(connection), sql, std::move(lock_name), std::move(prefix));
}

std::string render_mysql_migrations(const StoreUri& uri, std::span<const MigrationFile> migrations) {
  auto endpoint = parse_mysql_uri(uri.driver_uri, uri.redacted);
  MySql sql(uri.prefix);
  // Statements end with $$ so that the client passes the function bodies' ';' to the server.
  std::string script = fmt::format(
      "-- dblock migrations for MySQL/MariaDB: database `{}`, table prefix \"{}\". Apply with\n"
      "--   mariadb --database={} < THIS_FILE      (or mysql)\n"
      "-- The history records make `dblock migrate status` recognise what was applied by hand.\n"
      "DELIMITER $$\n{}$$\n",
      endpoint.database, uri.prefix, endpoint.database, sql.history_table);
  for (auto& migration : migrations) {
    // name and checksum are [a-z0-9_] and hex, safe as literals.
    std::string statements;
    for (auto& statement : split_mysql_script(fill_placeholders(migration.sql, "", uri.prefix)))
      statements += statement + "$$\n";
    script += fmt::format(
        "\n-- {:04d}_{}\n{}INSERT INTO `{}schema_history` (version, name, checksum, applied_at, applied_by, "
        "execution_ms, success)\nVALUES ({}, '{}', '{}', UTC_TIMESTAMP(6), 'dblock migrate sql', 0, TRUE)$$\n",
        migration.version, migration.name, statements, uri.prefix,
        migration.version, migration.name, migration.checksum);
  }
  return script + "DELIMITER ;\n";
}

}  // namespace dblock::detail
