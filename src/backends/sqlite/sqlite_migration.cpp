#include "backends/sqlite/sqlite_migration.hpp"

#include <fmt/format.h>

#include "backends/schema_objects.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

class SqliteCatalogRules final : public CatalogRules {
 public:
  /// A rowid table's primary key may hold NULL; dblock's SQLite files say NOT NULL where they mean it.
  bool primary_key_implies_not_null() const noexcept override { return false; }
};

}  // namespace

std::vector<AppliedMigration> read_history_rows(soci::session& session, const SqliteSql& sql) {
  std::vector<AppliedMigration> applied;
  soci::rowset<soci::row> rows = session.prepare << sql.history;
  for (auto& row : rows)
    applied.push_back(
        AppliedMigration{row.get<int>(0), row.get<std::string>(1), row.get<std::string>(2), row.get<int>(3) != 0});
  return applied;
}

SqliteMigrationDialect::SqliteMigrationDialect(std::string prefix) : prefix_(std::move(prefix)), sql_(prefix_) {}

std::string SqliteMigrationDialect::filled(std::string_view migration_sql) const {
  return fill_placeholders(migration_sql, "main", prefix_);
}

std::vector<std::string> SqliteMigrationDialect::statements(std::string_view migration_sql) const {
  return {as_one_statement(filled(migration_sql))};  // sqlite3_exec runs them all
}

std::string SqliteMigrationDialect::script_record(const MigrationFile& migration) const {
  return fmt::format(
      "INSERT INTO \"{}schema_history\" (version, name, checksum, applied_by, execution_ms, success)\n"
      "VALUES ({}, '{}', '{}', 'dblock migrate sql', 0, 1)",
      prefix_, migration.version, migration.name, migration.checksum);
}

ScriptFrame SqliteMigrationDialect::script_frame() const {
  return {.header = fmt::format("-- dblock migrations for SQLite, table prefix \"{}\". Apply with: sqlite3 FILE.db < "
                                "THIS_FILE\n",
                                prefix_),
          .preamble = {"PRAGMA journal_mode = WAL", "BEGIN IMMEDIATE", sql_.history_table},
          .epilogue = {"COMMIT"}};
}

namespace {

class SqliteMigrationSession final : public MigrationSession {
 public:
  SqliteMigrationSession(std::unique_ptr<SqliteSession> session, const SqliteSql& sql)
      : session_(std::move(session)), sql_(sql) {}

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
  SqliteMigrationSession(const SqliteMigrationSession&) = delete;
  SqliteMigrationSession& operator=(const SqliteMigrationSession&) = delete;

  std::vector<AppliedMigration> history() override {
    return session_->guarded("reading the migration history", [&] {
      session_->exec_script(sql_.history_table);
      return read_history_rows(session_->session(), sql_);
    });
  }

  // Each migration is a savepoint inside the run's transaction.
  void begin_migration() override { script("starting a migration", "SAVEPOINT dblock_migration"); }
  void commit_migration() override { script("ending a migration", "RELEASE dblock_migration"); }
  void undo_migration() override { session_->exec_script("ROLLBACK TO dblock_migration; RELEASE dblock_migration"); }
  void execute(const std::string& statement) override { script("running a migration", statement); }

  void record_applied(const MigrationFile& migration, std::string_view applied_by, milliseconds took) override {
    session_->guarded("recording a migration", [&] {
      int version = migration.version;
      std::string name(migration.name), checksum(migration.checksum), by(applied_by);
      std::int64_t took_ms = took.count();
      session_->session() << sql_.record, soci::use(version, "version"), soci::use(name, "name"),
          soci::use(checksum, "checksum"), soci::use(by, "applied_by"), soci::use(took_ms, "execution_ms");
    });
  }

  void forget(int version) override {
    session_->guarded("clearing a history record",
                      [&] { session_->session() << sql_.forget, soci::use(version, "version"); });
  }

  [[nodiscard]] bool one_transaction() const noexcept override { return true; }
  void finish() override {
    script("committing migrations", "COMMIT");
    finished_ = true;
  }

 private:
  void script(std::string_view what, const std::string& sql) {
    session_->guarded(what, [&] { session_->exec_script(sql); });
  }

  std::unique_ptr<SqliteSession> session_;
  const SqliteSql& sql_;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<MigrationSession> make_sqlite_migration_session(std::unique_ptr<SqliteSession> session,
                                                                const SqliteSql& sql) {
  return std::make_unique<SqliteMigrationSession>(std::move(session), sql);
}

const CatalogRules& SqliteMigrationDialect::catalog_rules() const noexcept {
  static const SqliteCatalogRules rules;
  return rules;
}

std::string SqliteMigrationDialect::runtime_grants(std::span<const CatalogObject> /*objects*/,
                                                   std::string_view /*role*/) const {
  return "-- SQLite has no roles: whoever may write the database file (and its directory) can use dblock.\n";
}

namespace {

class SqliteMigrations final : public MigrationBackend {
 public:
  SqliteMigrations(SessionPool<SqliteSession>& pool, const SqliteSql& sql, std::string prefix)
      : pool_(pool), sql_(sql), migration_dialect_(std::move(prefix)) {}

  Dialect dialect() const noexcept override { return Dialect::sqlite; }

  std::optional<std::vector<AppliedMigration>> read_history() override {
    auto session = pool_.lease();
    try {
      return session->guarded("reading the migration history",
                              [&] { return read_history_rows(session->session(), sql_); });
    } catch (const SchemaError&) {
      return std::nullopt;  // no history table yet
    }
  }

  std::vector<CatalogObject> catalog(std::span<const std::string> names) override {
    std::string joined;
    for (auto& name : names) joined += (joined.empty() ? "" : ",") + name;
    auto session = pool_.lease();
    return session->guarded("reading the catalog", [&] {
      std::vector<CatalogObject> objects;
      soci::rowset<soci::row> rows = (session->session().prepare << R"(
SELECT m.name, m.type, m.tbl_name, coalesce(m.sql, ''),
       CASE m.type WHEN 'table' THEN (SELECT group_concat(c.name, ',') FROM pragma_table_info(m.name) c)
                   WHEN 'index' THEN (SELECT group_concat(i.name, ',') FROM pragma_index_info(m.name) i) ELSE '' END,
       CASE WHEN m.type = 'table' THEN (SELECT group_concat(lower(c.type) || CASE WHEN c."notnull" THEN ' not null' ELSE '' END, ',')
                                        FROM pragma_table_info(m.name) c) ELSE '' END
FROM sqlite_master m WHERE instr(',' || :names || ',', ',' || m.name || ',') > 0 ORDER BY m.type, m.name)",
                                      soci::use(joined, "names"));
      for (auto& row : rows) {
        CatalogObject object{row.get<std::string>(1),
                             row.get<std::string>(0),
                             row.get<std::string>(2),
                             split_list(row.get<std::string>(4, "")),
                             row.get<std::string>(3),
                             false,
                             split_list(row.get<std::string>(5, ""))};
        if (object.kind != "trigger") object.definition.clear();  // tables and indexes are compared by shape
        if (object.kind != "index" && object.kind != "trigger") object.table.clear();
        objects.push_back(std::move(object));
      }
      return objects;
    });
  }
  const MigrationDialect& migration_dialect() const override { return migration_dialect_; }

  std::unique_ptr<MigrationSession> open_migration() override {
    return make_sqlite_migration_session(pool_.connect_dedicated(), sql_);
  }

 private:
  SessionPool<SqliteSession>& pool_;
  const SqliteSql& sql_;
  SqliteMigrationDialect migration_dialect_;
};

}  // namespace

std::unique_ptr<MigrationBackend> make_sqlite_migrations(SessionPool<SqliteSession>& pool, const SqliteSql& sql,
                                                         std::string prefix) {
  return std::make_unique<SqliteMigrations>(pool, sql, std::move(prefix));
}

}  // namespace dblock::detail
