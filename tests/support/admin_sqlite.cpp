// The test admin for SQLite, through its C API.
#include "support/admin.hpp"

#include <sqlite3.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <dblock/advisory_key.hpp>

namespace dblock::test {

namespace {

constexpr const char* kSqliteNow =
    "(CAST(strftime('%s','now') AS INTEGER) * 1000 + CAST(substr(strftime('%f','now'), 4) AS INTEGER))";

class SqliteAdmin final : public Admin {
 public:
  SqliteAdmin(const std::string& path, std::string prefix)
      : table_(fmt::format("\"{}locks\"", prefix)),
        counter_(fmt::format("\"{}token_counter\"", prefix)),
        history_(fmt::format("\"{}schema_history\"", prefix)) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error(sqlite3_errmsg(db_));
    sqlite3_busy_timeout(db_, 10000);
  }
  ~SqliteAdmin() override { sqlite3_close(db_); }

  void expire(const std::string& name) override {
    run(fmt::format("UPDATE {} SET expires_at = {} - 1000 WHERE name = {}", table_, kSqliteNow, quote(name)));
  }
  void steal(const std::string& name, const std::string& owner) override {
    run(
        fmt::format("UPDATE {} SET owner = {}, count = 1, token = (SELECT value + 1 FROM {}), "
                    "expires_at = {} + 3600000 WHERE name = {}",
                    table_, quote(owner), counter_, kSqliteNow, quote(name)));
  }

  void exec(const std::string& sql) override { run(sql); }

  std::vector<std::string> query(const std::string& sql) override {
    std::vector<std::string> rows;
    run(sql, &rows);
    return rows;
  }

  bool table_exists(const std::string& name) override {
    return query(fmt::format("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = {}", quote(name))).size() ==
           1;
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

}  // namespace

std::unique_ptr<Admin> make_sqlite_admin(const std::string& path, const std::string& prefix) {
  return std::make_unique<SqliteAdmin>(path, prefix);
}

}  // namespace dblock::test
