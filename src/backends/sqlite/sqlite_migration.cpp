#include "backends/sqlite/sqlite_migration.hpp"

#include <fmt/format.h>

namespace dblock::detail {

std::vector<AppliedMigration> read_history_rows(soci::session& session, const SqliteSql& sql) {
  std::vector<AppliedMigration> applied;
  soci::rowset<soci::row> rows = session.prepare << sql.history;
  for (auto& row : rows)
    applied.push_back(
        AppliedMigration{row.get<int>(0), row.get<std::string>(1), row.get<std::string>(2), row.get<int>(3) != 0});
  return applied;
}

namespace {

class SqliteMigrationSession final : public MigrationSession {
 public:
  SqliteMigrationSession(std::unique_ptr<SqliteSession> session, const SqliteSql& sql, std::string prefix)
      : session_(std::move(session)), sql_(sql), prefix_(std::move(prefix)) {}

  /// The database-level lock: one writer at a time (BEGIN IMMEDIATE), held until finish(). Tried
  /// once without the busy handler, which would otherwise wait here.
  bool try_lock() override {
    return session_->guarded("taking the migration lock", [&] {
      int busy_timeout = 0;
      session_->session() << "PRAGMA busy_timeout", soci::into(busy_timeout);
      session_->session() << "PRAGMA busy_timeout = 0";
      bool taken = true;
      try {
        session_->exec_script("BEGIN IMMEDIATE");
      } catch (const soci::sqlite3_soci_error& e) {
        if ((e.result() & 0xff) != kSqliteBusy) throw;
        taken = false;
      }
      session_->session() << fmt::format("PRAGMA busy_timeout = {}", busy_timeout);
      return taken;
    });
  }

  ~SqliteMigrationSession() override {
    if (!finished_) {
      try {
        session_->exec_script("ROLLBACK");
      } catch (...) {  // the connection closes next, which rolls back as well
      }
    }
  }

  std::vector<AppliedMigration> history() override {
    return session_->guarded("reading the migration history", [&] {
      session_->exec_script(sql_.history_table);
      return read_history_rows(session_->session(), sql_);
    });
  }

  void forget(int version) override {
    session_->guarded("clearing a history record",
                      [&] { session_->session() << sql_.forget, soci::use(version, "version"); });
  }

  void apply(const MigrationFile& migration, std::string_view applied_by) override {
    auto started = std::chrono::steady_clock::now();
    try {
      session_->exec_script("SAVEPOINT dblock_migration");
      session_->exec_script(fill_placeholders(migration.sql, "main", prefix_));
      int version = migration.version;
      std::string name(migration.name), checksum(migration.checksum), by(applied_by);
      auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
      std::int64_t elapsed_ms = elapsed.count();
      session_->session() << sql_.record, soci::use(version, "version"), soci::use(name, "name"),
          soci::use(checksum, "checksum"), soci::use(by, "applied_by"), soci::use(elapsed_ms, "execution_ms");
      session_->exec_script("RELEASE dblock_migration");
    } catch (const std::exception& e) {
      try {
        session_->exec_script("ROLLBACK TO dblock_migration; RELEASE dblock_migration");
      } catch (...) {
      }
      throw DatabaseError(fmt::format("migration {:04d}_{} failed and was rolled back, nothing of it applied: {}",
                                      migration.version, migration.name, e.what()));
    }
  }

  void finish() override {
    session_->guarded("committing migrations", [&] { session_->exec_script("COMMIT"); });
    finished_ = true;
  }

 private:
  std::unique_ptr<SqliteSession> session_;
  const SqliteSql& sql_;
  std::string prefix_;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<MigrationSession> make_sqlite_migration_session(std::unique_ptr<SqliteSession> session,
                                                                const SqliteSql& sql, std::string prefix) {
  return std::make_unique<SqliteMigrationSession>(std::move(session), sql, std::move(prefix));
}

std::string render_sqlite_migrations(const StoreUri& uri, std::span<const MigrationFile> migrations) {
  SqliteSql sql(uri.prefix);
  std::string script = fmt::format(
      "-- dblock migrations for SQLite, table prefix \"{}\". Apply with: sqlite3 FILE.db < THIS_FILE\n"
      "-- The history records make `dblock migrate status` recognise what was applied by hand.\n"
      "PRAGMA journal_mode = WAL;\nBEGIN IMMEDIATE;\n{};\n",
      uri.prefix, sql.history_table);
  for (auto& migration : migrations) {
    // The same fill() `up` applies; name and checksum are [a-z0-9_] and hex, safe as literals.
    script += fmt::format(
        "\n-- {:04d}_{}\n{}\nINSERT INTO \"{}schema_history\" (version, name, checksum, applied_by, execution_ms, "
        "success)\nVALUES ({}, '{}', '{}', 'dblock migrate sql', 0, 1);\n",
        migration.version, migration.name, fill_placeholders(migration.sql, "main", uri.prefix), uri.prefix,
        migration.version, migration.name, migration.checksum);
  }
  return script + "COMMIT;\n";
}

}  // namespace dblock::detail
