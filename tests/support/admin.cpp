#include "support/admin.hpp"

#include <libpq-fe.h>
#include <sqlite3.h>

#include <stdexcept>

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

 private:
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

}  // namespace

std::unique_ptr<Admin> make_admin(const std::string& dialect, const std::string& dsn, const std::string& schema,
                                  const std::string& prefix) {
  if (dialect == "postgresql") return std::make_unique<PgAdmin>(dsn, schema, prefix);
  if (dialect == "sqlite") return std::make_unique<SqliteAdmin>(dsn.substr(std::string("sqlite://").size()), prefix);
  throw std::runtime_error("no test admin for dialect " + dialect);
}

}  // namespace dblock::test
