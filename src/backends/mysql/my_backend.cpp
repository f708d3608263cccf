#include "backends/mysql/my_backend.hpp"

#include <mysql_driver.h>

#include <array>

#include <fmt/format.h>

#include "backends/migration_lock.hpp"
#include "backends/mysql/my_connection.hpp"
#include "backends/mysql/my_named_lock.hpp"
#include "backends/mysql/my_rights.hpp"
#include "backends/mysql/my_script.hpp"
#include "backends/session_pool.hpp"
#include "base/json.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

std::int64_t micros(milliseconds duration) { return duration.count() * 1000; }

/// Every SQL statement of table mode, built once per store for its prefix. Tables are not
/// qualified: they live in the database the URI names, which every session uses.
struct MySql {
  explicit MySql(std::string_view prefix) {
    std::size_t id = 0;
    auto make = [&](const char* name, std::string_view sql) {
      return MyStatement{id++, name, fill(sql, {{"{prefix}", prefix}, {"{held}", kHeldTable}})};
    };
    acquire = make("acquire", "SELECT `{prefix}acquire_held`(?, ?, ?, ?)");
    release = make("release", "SELECT `{prefix}release`(?, ?, ?)");
    // One statement renews every lock; affected rows says whether all were renewed (no UPDATE
    // ... RETURNING on MariaDB), and only when some were not does renewed_of ask which.
    renew = make("renew", R"(
UPDATE `{prefix}locks` l JOIN {held} ON l.name = h.name AND l.owner = h.owner AND l.token = h.token
SET l.expires_at = GREATEST(l.expires_at, UTC_TIMESTAMP(6) + INTERVAL h.ttl_us MICROSECOND)
WHERE l.expires_at > UTC_TIMESTAMP(6))");
    renewed_of = make("renewed", R"(
SELECT h.position - 1 FROM `{prefix}locks` l JOIN {held} ON l.name = h.name AND l.owner = h.owner AND l.token = h.token
WHERE l.expires_at > UTC_TIMESTAMP(6))");
    lease_left = make("lease_left", R"(
SELECT FLOOR(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000) FROM `{prefix}locks` WHERE name = ?)");
    list = make("list", R"(
SELECT name, owner, count, token, FLOOR(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000)
FROM `{prefix}locks` WHERE (? = '' OR name = ?) ORDER BY name)");
    force_release = make("force_release", "DELETE FROM `{prefix}locks` WHERE name = ?");
    // DELETE re-checks the expiry on the newest row version under its row lock, so a row taken
    // over or renewed meanwhile stays. Oldest first: the plain ORDER BY form deadlocked least
    // with acquirers (doc/database-facts.md §3); what deadlocks is retried.
    reap = make("reap", "DELETE FROM `{prefix}locks` WHERE expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ?");
    census = make("census", R"(
SELECT COALESCE(SUM(expires_at > UTC_TIMESTAMP(6)), 0), COALESCE(SUM(expires_at <= UTC_TIMESTAMP(6)), 0),
       COALESCE(FLOOR(TIMESTAMPDIFF(MICROSECOND, MIN(IF(expires_at > UTC_TIMESTAMP(6), acquired_at, NULL)),
                                    UTC_TIMESTAMP(6)) / 1000), 0)
FROM `{prefix}locks`)");
    seed_expired = make("seed_expired", R"(
INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at)
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?)
SELECT CONCAT(?, ? + i), 'dblock-bench', 1, NEXTVAL(`{prefix}token_seq`), UTC_TIMESTAMP(6) - INTERVAL 2 SECOND,
       UTC_TIMESTAMP(6) - INTERVAL 1 SECOND FROM g)");
    schema_version = make("schema_version",
                          "SELECT COALESCE(MAX(version), 0) FROM `{prefix}schema_history` WHERE success");
    history = make("history", "SELECT version, name, checksum, success FROM `{prefix}schema_history` ORDER BY version");
    record_started = make("record_started", R"(
INSERT INTO `{prefix}schema_history` (version, name, checksum, applied_at, applied_by, execution_ms, success)
VALUES (?, ?, ?, UTC_TIMESTAMP(6), ?, 0, FALSE)
ON DUPLICATE KEY UPDATE applied_at = VALUES(applied_at), applied_by = VALUES(applied_by), success = FALSE)");
    record_done = make("record_done",
                       "UPDATE `{prefix}schema_history` SET success = TRUE, execution_ms = ? WHERE version = ?");
    forget = make("forget", "DELETE FROM `{prefix}schema_history` WHERE version = ?");
    migration_lock = make("migration_lock", fmt::format("SELECT GET_LOCK({}, ?)", kServerLockName));
    migration_unlock = make("migration_unlock", fmt::format("SELECT RELEASE_LOCK({})", kServerLockName));
    // Names as one comma-separated parameter (dblock's never hold a comma); routine names compare
    // without case, as MySQL resolves them.
    grants = make("grants", "SHOW GRANTS");
    catalog = make("catalog", R"(
SELECT TABLE_NAME, CASE TABLE_TYPE WHEN 'BASE TABLE' THEN 'table' WHEN 'SEQUENCE' THEN 'sequence'
                                   WHEN 'VIEW' THEN 'view' ELSE 'other' END, '',
       IF(TABLE_TYPE = 'BASE TABLE', (SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS c
                                      WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME), ''), '', 0
FROM information_schema.TABLES t WHERE TABLE_SCHEMA = DATABASE() AND FIND_IN_SET(CONVERT(TABLE_NAME USING utf8mb4), ?)
UNION ALL
SELECT DISTINCT INDEX_NAME, 'index', TABLE_NAME, '', '', 0 FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND FIND_IN_SET(CONVERT(TABLE_NAME USING utf8mb4), ?)
UNION ALL
SELECT ROUTINE_NAME, LOWER(ROUTINE_TYPE), '', '', COALESCE(ROUTINE_DEFINITION, ''), ROUTINE_DEFINITION IS NULL
FROM information_schema.ROUTINES
WHERE ROUTINE_SCHEMA = DATABASE() AND FIND_IN_SET(LOWER(CONVERT(ROUTINE_NAME USING utf8mb4)), ?)
UNION ALL
SELECT TRIGGER_NAME, 'trigger', EVENT_OBJECT_TABLE, '', ACTION_STATEMENT, 0 FROM information_schema.TRIGGERS
WHERE TRIGGER_SCHEMA = DATABASE() AND FIND_IN_SET(CONVERT(TRIGGER_NAME USING utf8mb4), ?))");
    history_table = fill(R"(
CREATE TABLE IF NOT EXISTS `{prefix}schema_history` (
  version      INT NOT NULL PRIMARY KEY,
  name         VARCHAR(255) NOT NULL,
  checksum     VARCHAR(64) NOT NULL,
  applied_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  applied_by   VARCHAR(512) NOT NULL,
  execution_ms BIGINT NOT NULL,
  success      BOOLEAN NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4)",
                         {{"{prefix}", prefix}});
  }

  // The held locks as a table: one JSON parameter, [[name, owner, token, ttl_us], ...], which
  // keeps 10,000 locks clear of the 65,535-placeholder limit.
  static constexpr std::string_view kHeldTable = R"(JSON_TABLE(?, '$[*]' COLUMNS (
  name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]',
  owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[1]',
  token BIGINT PATH '$[2]',
  ttl_us BIGINT PATH '$[3]',
  position FOR ORDINALITY)) h)";

  MyStatement acquire, release, renew, renewed_of, lease_left, list, force_release, reap, census, seed_expired,
      schema_version, history, record_started, record_done, forget, migration_lock, migration_unlock, grants, catalog;
  std::string history_table;
};

std::vector<AppliedMigration> parse_history(const MyRows& rows) {
  std::vector<AppliedMigration> applied;
  for (auto& row : rows)
    applied.push_back(AppliedMigration{static_cast<int>(row.num(0)), row.str(1), row.str(2), row.num(3) != 0});
  return applied;
}

/// 'count token' from the acquire function: the grant, or empty for NULL (held by another owner).
std::optional<Grant> parse_grant(const MyRows& rows) {
  if (rows.empty() || !rows.front().text(0)) return std::nullopt;
  auto& text = *rows.front().text(0);
  auto space = text.find(' ');
  return Grant{std::stoll(text.substr(0, space)), std::stoll(text.substr(space + 1))};
}

/// The migration lock's name: '#' keeps it apart from every lock name (those follow ':').
std::string migration_lock_name(const StoreUri& uri, std::string_view database) {
  return fmt::format("{}.{}#migrate", database, uri.prefix);
}

class MyMigrationSession final : public MigrationSession {
 public:
  MyMigrationSession(std::unique_ptr<MyConnection> connection, const MySql& sql, std::string lock_name,
                     std::string prefix, milliseconds lock_timeout)
      : connection_(std::move(connection)), sql_(sql), lock_name_(std::move(lock_name)), prefix_(std::move(prefix)) {
    std::array<MyParam, 5> params{lock_name_, lock_name_, lock_name_, lock_name_, std::int64_t{0}};
    poll_migration_lock([&] { return first_int64(connection_->query(sql_.migration_lock, params)) == 1; },
                        lock_timeout);
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

/// Bare Connector/C++: the same prepared statements on one connection, no pool, no bookkeeping.
class MyRawClient final : public RawLockClient {
 public:
  MyRawClient(std::unique_ptr<MyConnection> connection, const MySql& sql)
      : connection_(std::move(connection)), sql_(sql) {}

  std::optional<std::int64_t> acquire(const std::string& name, const std::string& owner,
                                      std::int64_t ttl_ms) override {
    std::array<MyParam, 4> params{name, owner, ttl_ms * 1000, std::int64_t{0}};
    auto grant = parse_grant(connection_->query(sql_.acquire, params));
    if (!grant) return std::nullopt;
    return grant->token;
  }

  bool release(const std::string& name, const std::string& owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    return first_int64(connection_->query(sql_.release, params)).has_value();
  }

  bool blocking_lock(std::int64_t key) override {
    auto name = fmt::format("dblock-bench:{}", key);
    std::array<MyParam, 2> params{name, 31536000.0};
    connection_->query(blocking_lock_, params);
    return true;
  }
  void blocking_unlock(std::int64_t key) override {
    auto name = fmt::format("dblock-bench:{}", key);
    std::array<MyParam, 1> params{name};
    connection_->query(blocking_unlock_, params);
  }
  std::string_view blocking_lock_functions() const noexcept override { return "GET_LOCK + RELEASE_LOCK"; }

 private:
  std::unique_ptr<MyConnection> connection_;
  const MySql& sql_;
  MyStatement blocking_lock_{40, "GET_LOCK", "SELECT GET_LOCK(?, ?)"};
  MyStatement blocking_unlock_{41, "RELEASE_LOCK", "SELECT RELEASE_LOCK(?)"};
};

std::string held_json(std::span<const HeldRef> held) {
  std::string json = "[";
  for (std::size_t i = 0; i < held.size(); ++i)
    json += fmt::format("{}[{},{},{},{}]", i == 0 ? "" : ",", json_string(held[i].name), json_string(held[i].owner),
                        held[i].token, micros(held[i].ttl));
  return json + "]";
}

class MyBackend final : public Backend {
 public:
  MyBackend(const StoreUri& uri, const BackendSettings& settings)
      : endpoint_(parse_mysql_uri(uri.driver_uri, uri.redacted)),
        redacted_(uri.redacted),
        settings_(settings),
        migration_lock_name_(migration_lock_name(uri, endpoint_.database)),
        prefix_(uri.prefix),
        sql_(uri.prefix),
        named_lock_sql_(endpoint_.database, uri.prefix),
        pool_([this] { return connect(); }, uri.redacted, uri.pool_size, settings.connect_timeout) {
    auto first = pool_.lease();  // proves the server and the credentials now, not at first use
  }

  Dialect dialect() const noexcept override { return Dialect::mysql; }


  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token) override {
    std::array<MyParam, 4> params{name, owner, micros(ttl), held_token};
    auto session = pool_.lease();
    return parse_grant(session->query(sql_.acquire, params));
  }

  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    auto session = pool_.lease();
    return first_int64(session->query(sql_.release, params));
  }

  std::vector<std::size_t> renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    auto json = held_json(held);
    std::array<MyParam, 1> params{json};
    // Extending a lease is idempotent: a session that turns out broken is replaced and the
    // statement run once more.
    auto renewed = pool_.idempotent([&](MyConnection& session) { return session.update(sql_.renew, params); });
    std::vector<std::size_t> positions;
    if (renewed == held.size()) {
      for (std::size_t i = 0; i < held.size(); ++i) positions.push_back(i);
      return positions;
    }
    for (auto& row : pool_.idempotent([&](MyConnection& session) { return session.query(sql_.renewed_of, params); }))
      positions.push_back(static_cast<std::size_t>(row.num(0)));
    return positions;
  }

  std::optional<milliseconds> lease_left(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    auto rows = pool_.idempotent([&](MyConnection& session) { return session.query(sql_.lease_left, params); });
    if (rows.empty()) return std::nullopt;
    return milliseconds(rows.front().num(0));
  }

  bool force_release(std::string_view name) override {
    std::array<MyParam, 1> params{name};
    return pool_.lease()->update(sql_.force_release, params) > 0;
  }

  std::size_t reap(std::size_t batch) override {
    std::array<MyParam, 1> params{static_cast<std::int64_t>(batch)};
    return static_cast<std::size_t>(pool_.lease()->update(sql_.reap, params));
  }

  LockCensus census() override {
    auto row = pool_.idempotent([&](MyConnection& session) { return session.query(sql_.census, {}); }).at(0);
    return LockCensus{row.num(0), row.num(1), milliseconds(row.num(2))};
  }

  bool has_advisory_locks() const noexcept override { return true; }
  void check_advisory_target(const AdvisoryTarget& target) const override { check_named_lock_target(target); }
  std::unique_ptr<AdvisorySession> pin_advisory_session() override {
    return make_my_named_lock_session(pool_.lease(), named_lock_sql_);
  }
  void on_pool_dry(std::weak_ptr<const std::function<void()>> give_back) override {
    pool_.add_reclaimer(std::move(give_back));
  }

  std::unique_ptr<RawLockClient> raw_client() override { return std::make_unique<MyRawClient>(connect(), sql_); }

  void seed_expired(std::string_view stem, std::size_t count) override {
    // Chunks stay below the servers' default recursion limit of a CTE (1,000).
    constexpr std::size_t kChunk = 1000;
    auto session = pool_.lease();
    for (std::size_t done = 0; done < count; done += kChunk) {
      std::array<MyParam, 3> params{static_cast<std::int64_t>(std::min(kChunk, count - done)), stem,
                                    static_cast<std::int64_t>(done)};
      session->update(sql_.seed_expired, params);
    }
  }

  int schema_version() override {
    auto rows = pool_.idempotent([&](MyConnection& session) { return session.query(sql_.schema_version, {}); });
    return static_cast<int>(first_int64(rows).value_or(0));
  }

  std::optional<std::vector<AppliedMigration>> read_history() override {
    try {
      return parse_history(pool_.idempotent([&](MyConnection& session) { return session.query(sql_.history, {}); }));
    } catch (const SchemaError&) {
      return std::nullopt;  // no history table yet
    }
  }

  std::vector<CatalogObject> catalog(std::span<const std::string> names) override {
    std::string joined;
    for (auto& name : names) joined += (joined.empty() ? "" : ",") + name;
    std::array<MyParam, 4> params{joined, joined, joined, joined};
    auto rows = pool_.idempotent([&](MyConnection& session) { return session.query(sql_.catalog, params); });
    std::vector<CatalogObject> objects;
    for (auto& row : rows)
      objects.push_back({row.str(1), row.str(0), row.str(2), split_list(row.str(3)), row.str(4), row.num(5) != 0});
    return objects;
  }
  std::vector<std::string> missing_migration_rights(std::span<const CatalogObject> to_create,
                                                    std::span<const CatalogObject> to_redefine) override {
    MyMigrationNeeds needs{.history = prefix_ + "schema_history"};
    auto routine = [](const CatalogObject& object) { return object.kind == "function" || object.kind == "procedure"; };
    for (auto& object : to_create) {
      if (object.kind == "table" || object.kind == "sequence") needs.create_tables.push_back(object.name);
      if (routine(object)) needs.create_routines.push_back(object.name);
    }
    // Tables and sequences are created IF NOT EXISTS (a resumed migration): nothing to re-define.
    // Routines are created with CREATE OR REPLACE, which MariaDB lets run only with ALTER ROUTINE,
    // even for a routine that does not exist yet.
    for (auto& objects : {to_create, to_redefine})
      for (auto& object : objects)
        if (routine(object)) needs.replace_routines.push_back(object.name);
    std::vector<std::string> rows;
    for (auto& row : pool_.idempotent([&](MyConnection& session) { return session.query(sql_.grants, {}); }))
      rows.push_back(row.str(0));
    return missing_mysql_migration_rights(rows, endpoint_.database, needs);
  }
  std::string filled(std::string_view migration_sql) const override { return fill_placeholders(migration_sql, "", prefix_); }
  std::string history_ddl() const override { return sql_.history_table; }
  bool migrations_resume() const noexcept override { return true; }

  std::unique_ptr<MigrationSession> begin_migration(milliseconds lock_timeout) override {
    return std::make_unique<MyMigrationSession>(connect(), sql_, migration_lock_name_, prefix_, lock_timeout);
  }

 private:
  std::unique_ptr<MyConnection> connect() const {
    return std::make_unique<MyConnection>(endpoint_, redacted_, settings_.connect_timeout, settings_.statement_timeout);
  }

  std::vector<LockInfo> list_rows(std::string_view only_name) override {
    std::array<MyParam, 2> params{only_name, only_name};
    std::vector<LockInfo> locks;
    for (auto& row : pool_.idempotent([&](MyConnection& session) { return session.query(sql_.list, params); }))
      locks.push_back(LockInfo{row.str(0), row.str(1), row.num(2), row.num(3), milliseconds(row.num(4))});
    return locks;
  }

  MyEndpoint endpoint_;
  std::string redacted_;
  BackendSettings settings_;
  std::string migration_lock_name_;
  std::string prefix_;
  MySql sql_;
  MyNamedLockSql named_lock_sql_;
  SessionPool<MyConnection> pool_;
};

}  // namespace

std::string mysql_database_of(const StoreUri& uri) { return parse_mysql_uri(uri.driver_uri, uri.redacted).database; }

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

std::string mysql_driver_version() {
  auto* driver = sql::mysql::get_mysql_driver_instance();
  return fmt::format("MySQL Connector/C++ {}.{}.{}", driver->getMajorVersion(), driver->getMinorVersion(),
                     driver->getPatchVersion());
}

std::unique_ptr<Backend> make_mysql_backend(const StoreUri& uri, const BackendSettings& settings) {
  return std::make_unique<MyBackend>(uri, settings);
}

}  // namespace dblock::detail
