// The test admin for MySQL/MariaDB, through Connector/C++.
#include "support/admin.hpp"

#include <cppconn/exception.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <mysql_connection.h>
#include <mysql_driver.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <dblock/advisory_key.hpp>

namespace dblock::test {

namespace {

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
    history_ = fmt::format("\"{}schema_history\"", prefix_);
  }

  void expire(const std::string& name) override {
    run(fmt::format("UPDATE {} SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE name = {}", table_,
                    quote(name)));
  }
  void steal(const std::string& name, const std::string& owner) override {
    // A token above the holder's (a Galera installation has no sequence to draw one from).
    run(
        fmt::format("UPDATE {} SET owner = {}, count = 1, token = token + 1, "
                    "expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE name = {}",
                    table_, quote(owner), quote(name)));
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
  /// The GET_LOCK name dblock uses (doc/mysql.md: GET_LOCK mode).
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
  std::string history_;
};

}  // namespace

std::unique_ptr<Admin> make_mysql_admin(const std::string& dsn, const std::string& prefix, bool client_found_rows) {
  return std::make_unique<MyAdmin>(dsn, prefix, client_found_rows);
}

}  // namespace dblock::test
