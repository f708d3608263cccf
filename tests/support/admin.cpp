#include "support/admin.hpp"

#include <libpq-fe.h>
#include <mysql_driver.h>
#include <mysql_connection.h>
#include <cppconn/exception.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <sqlite3.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include <dblock/advisory_key.hpp>
#include <fmt/format.h>

namespace dblock::test {

namespace {

class PgAdmin final : public Admin {
 public:
  PgAdmin(const std::string& dsn, std::string schema, std::string prefix)
      : conn_(PQconnectdb(dsn.c_str())), schema_(schema), table_(fmt::format("\"{}\".\"{}locks\"", schema, prefix)),
        sequence_(fmt::format("\"{}\".\"{}token_seq\"", schema, prefix)),
        history_(fmt::format("\"{}\".\"{}schema_history\"", schema, prefix)) {
    if (PQstatus(conn_) != CONNECTION_OK) throw std::runtime_error(PQerrorMessage(conn_));
  }
  ~PgAdmin() override { PQfinish(conn_); }

  void expire(const std::string& name) override {
    run(fmt::format("UPDATE {} SET expires_at = clock_timestamp() - interval '1 second' WHERE name = {}", table_,
                    quote(name)));
  }
  void steal(const std::string& name, const std::string& owner) override {
    run(fmt::format("UPDATE {} SET owner = {}, count = 1, token = nextval('{}'), "
                    "expires_at = clock_timestamp() + interval '1 hour' WHERE name = {}",
                    table_, quote(owner), sequence_, quote(name)));
  }
  void insert_expired(const std::string& stem, int count) override {
    run(fmt::format("INSERT INTO {} (name, owner, count, token, acquired_at, expires_at) "
                    "SELECT {} || g, 'ghost', 1, nextval('{}'), clock_timestamp() - interval '2 s', "
                    "clock_timestamp() - interval '1 s' FROM generate_series(1, {}) g",
                    table_, quote(stem), sequence_, count));
  }

  void exec(const std::string& sql) override { run(sql); }

  std::vector<std::string> query(const std::string& sql) override {
    PGresult* result = PQexec(conn_, sql.c_str());
    std::vector<std::string> rows;
    if (PQresultStatus(result) != PGRES_TUPLES_OK) {
      std::string error = PQresultErrorMessage(result);
      PQclear(result);
      throw std::runtime_error(error);
    }
    for (int row = 0; row < PQntuples(result); ++row) rows.emplace_back(PQgetvalue(result, row, 0));
    PQclear(result);
    return rows;
  }

  bool table_exists(const std::string& name) override {
    return query(fmt::format("SELECT 1 FROM pg_tables WHERE schemaname = {} AND tablename = {}", quote(schema_),
                             quote(name)))
               .size() == 1;
  }

  std::string history_table() const override { return history_; }

  bool advisory_held(const std::string& name) override {
    return query("SELECT count(*) FROM pg_locks WHERE " + advisory_lock_of(name)).at(0) != "0";
  }

  int kill_advisory_holder(const std::string& name) override {
    return static_cast<int>(query("SELECT pg_terminate_backend(pid, 5000) FROM pg_locks WHERE " + advisory_lock_of(name)).size());
  }

 private:
  /// The pg_locks condition for the advisory lock of a name.
  static std::string advisory_lock_of(const std::string& name) {
    auto key = static_cast<std::uint64_t>(dblock::AdvisoryKey::from_name(name).key());
    return fmt::format("locktype = 'advisory' AND classid = {} AND objid = {} AND objsubid = 1 AND granted",
                       key >> 32, key & 0xffffffffu);
  }
  std::string quote(const std::string& text) {
    char* quoted = PQescapeLiteral(conn_, text.c_str(), text.size());
    std::string out(quoted);
    PQfreemem(quoted);
    return out;
  }
  void run(const std::string& sql) {
    PGresult* result = PQexec(conn_, sql.c_str());
    auto status = PQresultStatus(result);
    std::string error = PQresultErrorMessage(result);
    PQclear(result);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) throw std::runtime_error(error);
  }

  PGconn* conn_;
  std::string schema_;
  std::string table_;
  std::string sequence_;
  std::string history_;
};

constexpr const char* kSqliteNow =
    "(CAST(strftime('%s','now') AS INTEGER) * 1000 + CAST(substr(strftime('%f','now'), 4) AS INTEGER))";

class SqliteAdmin final : public Admin {
 public:
  SqliteAdmin(const std::string& path, std::string prefix)
      : table_(fmt::format("\"{}locks\"", prefix)), counter_(fmt::format("\"{}token_counter\"", prefix)),
        history_(fmt::format("\"{}schema_history\"", prefix)) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error(sqlite3_errmsg(db_));
    sqlite3_busy_timeout(db_, 10000);
  }
  ~SqliteAdmin() override { sqlite3_close(db_); }

  void expire(const std::string& name) override {
    run(fmt::format("UPDATE {} SET expires_at = {} - 1000 WHERE name = {}", table_, kSqliteNow, quote(name)));
  }
  void steal(const std::string& name, const std::string& owner) override {
    run(fmt::format("UPDATE {} SET owner = {}, count = 1, token = (SELECT value + 1 FROM {}), "
                    "expires_at = {} + 3600000 WHERE name = {}",
                    table_, quote(owner), counter_, kSqliteNow, quote(name)));
  }
  void insert_expired(const std::string& stem, int count) override {
    run(fmt::format("WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {0}) "
                    "INSERT INTO {1} (name, owner, count, token, acquired_at, expires_at) "
                    "SELECT {2} || i, 'ghost', 1, (SELECT value FROM {3}) + i, {4} - 2000, {4} - 1000 FROM g",
                    count, table_, quote(stem), counter_, kSqliteNow));
  }

  void exec(const std::string& sql) override { run(sql); }

  std::vector<std::string> query(const std::string& sql) override {
    std::vector<std::string> rows;
    run(sql, &rows);
    return rows;
  }

  bool table_exists(const std::string& name) override {
    return query(fmt::format("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = {}", quote(name))).size() == 1;
  }

  std::string history_table() const override { return history_; }

  bool advisory_held(const std::string&) override { throw std::runtime_error("SQLite has no advisory locks"); }
  int kill_advisory_holder(const std::string&) override { throw std::runtime_error("SQLite has no advisory locks"); }

 private:
  static std::string quote(const std::string& text) {
    char* quoted = sqlite3_mprintf("%Q", text.c_str());
    std::string out(quoted);
    sqlite3_free(quoted);
    return out;
  }
  static int collect(void* rows, int, char** values, char**) {
    static_cast<std::vector<std::string>*>(rows)->emplace_back(values[0] != nullptr ? values[0] : "");
    return 0;
  }
  void run(const std::string& sql, std::vector<std::string>* rows = nullptr) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), rows != nullptr ? collect : nullptr, rows, &error) != SQLITE_OK) {
      std::string message = error != nullptr ? error : "?";
      sqlite3_free(error);
      throw std::runtime_error(message);
    }
  }

  sqlite3* db_ = nullptr;
  std::string table_;
  std::string counter_;
  std::string history_;
};

/// MySQL/MariaDB through Connector/C++, with ANSI_QUOTES and PIPES_AS_CONCAT so that the shared
/// tests' portable SQL ("quoted" identifiers, ||) means the same as on the other servers.
class MyAdmin final : public Admin {
 public:
  MyAdmin(const std::string& dsn, std::string prefix, bool client_found_rows) : prefix_(std::move(prefix)) {
    // mysql://user:pw@127.0.0.1:PORT/db, as tools/testdb.sh prints it
    auto rest = dsn.substr(dsn.find("://") + 3);
    auto at = rest.rfind('@', rest.find('/'));
    auto credentials = rest.substr(0, at);
    auto host = rest.substr(at + 1, rest.find('/') - at - 1);
    database_ = rest.substr(rest.find('/') + 1);
    database_ = database_.substr(0, database_.find('?'));
    auto colon = credentials.find(':');
    sql::ConnectOptionsMap options;
    options["hostName"] = sql::SQLString("tcp://" + host);
    options["userName"] = sql::SQLString(credentials.substr(0, colon));
    options["password"] = sql::SQLString(credentials.substr(colon + 1));
    options["CLIENT_FOUND_ROWS"] = client_found_rows;  // Connector/J's default: matched rows, not changed ones
    conn_.reset(sql::mysql::get_mysql_driver_instance()->connect(options));
    conn_->setSchema(database_);
    run("SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES,PIPES_AS_CONCAT'), time_zone = '+00:00', "
        "max_recursive_iterations = 10000000");
    table_ = fmt::format("\"{}locks\"", prefix_);
    sequence_ = fmt::format("\"{}token_seq\"", prefix_);
    history_ = fmt::format("\"{}schema_history\"", prefix_);
  }

  void expire(const std::string& name) override {
    run(fmt::format("UPDATE {} SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE name = {}", table_,
                    quote(name)));
  }
  void steal(const std::string& name, const std::string& owner) override {
    run(fmt::format("UPDATE {} SET owner = {}, count = 1, token = NEXTVAL({}), "
                    "expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE name = {}",
                    table_, quote(owner), sequence_, quote(name)));
  }
  void insert_expired(const std::string& stem, int count) override {
    run(fmt::format("INSERT INTO {} (name, owner, count, token, acquired_at, expires_at) "
                    "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {}) "
                    "SELECT CONCAT({}, i), 'ghost', 1, NEXTVAL({}), UTC_TIMESTAMP(6) - INTERVAL 2 SECOND, "
                    "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND FROM g",
                    table_, count, quote(stem), sequence_));
  }

  void exec(const std::string& sql) override { run(sql); }

  std::vector<std::string> query(const std::string& sql) override {
    try {
      std::unique_ptr<sql::Statement> statement(conn_->createStatement());
      std::unique_ptr<sql::ResultSet> result(statement->executeQuery(sql));
      std::vector<std::string> rows;
      while (result->next()) rows.push_back(result->isNull(1) ? "" : result->getString(1).asStdString());
      return rows;
    } catch (const sql::SQLException& e) {
      throw std::runtime_error(fmt::format("{}: {}", sql, e.what()));
    }
  }

  bool table_exists(const std::string& name) override {
    return query(fmt::format("SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND "
                             "table_name = {} AND table_type = 'BASE TABLE'",
                             quote(name)))
               .size() == 1;
  }

  std::string history_table() const override { return history_; }

  bool advisory_held(const std::string& name) override {
    return !query(fmt::format("SELECT IS_USED_LOCK({})", server_lock_name(name))).at(0).empty();
  }

  int kill_advisory_holder(const std::string& name) override {
    auto holder = query(fmt::format("SELECT IS_USED_LOCK({})", server_lock_name(name))).at(0);
    if (holder.empty()) return 0;
    run("KILL CONNECTION " + holder);
    // KILL only flags the session; wait (bounded) until the server has let the lock go.
    for (int i = 0; i < 500 && advisory_held(name); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (advisory_held(name)) throw std::runtime_error("the killed session still holds " + name);
    return 1;
  }

 private:
  /// The GET_LOCK name dblock uses (README: GET_LOCK mode).
  std::string server_lock_name(const std::string& name) {
    auto full = quote(fmt::format("{}.{}:{}", database_, prefix_, name));
    return fmt::format("IF(CHAR_LENGTH({0}) > 64 OR LENGTH({0}) > 192, SHA2({0}, 256), {0})", full);
  }
  static std::string quote(const std::string& text) {
    std::string out = "'";
    for (char c : text) {
      if (c == '\'' || c == '\\') out += c;
      out += c;
    }
    return out + "'";
  }
  void run(const std::string& sql) {
    try {
      std::unique_ptr<sql::Statement> statement(conn_->createStatement());
      statement->execute(sql);
    } catch (const sql::SQLException& e) {
      throw std::runtime_error(fmt::format("{}: {}", sql, e.what()));
    }
  }

  std::unique_ptr<sql::Connection> conn_;
  std::string prefix_;
  std::string database_;
  std::string table_;
  std::string sequence_;
  std::string history_;
};

}  // namespace

std::unique_ptr<Admin> make_admin(const std::string& dialect, const std::string& dsn, const std::string& schema,
                                  const std::string& prefix, bool client_found_rows) {
  if (dialect == "postgresql") return std::make_unique<PgAdmin>(dsn, schema, prefix);
  if (dialect == "mysql") return std::make_unique<MyAdmin>(dsn, prefix, client_found_rows);
  if (dialect == "sqlite") return std::make_unique<SqliteAdmin>(dsn.substr(std::string("sqlite://").size()), prefix);
  throw std::runtime_error("no test admin for dialect " + dialect);
}

}  // namespace dblock::test
