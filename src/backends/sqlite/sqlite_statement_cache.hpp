#pragma once
// Prepared statements of one SQLite connection, keyed by their text: fenced transactions run the
// same few statements over and over, and preparing one costs more than running it.
// SOCI's sqlite3 header wraps <sqlite3.h> in namespace sqlite_api: include it first.
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace dblock::detail {

class SqliteStatementCache {
 public:
  struct Finalize {
    void operator()(sqlite_api::sqlite3_stmt* statement) const noexcept { sqlite_api::sqlite3_finalize(statement); }
  };
  using Statement = std::unique_ptr<sqlite_api::sqlite3_stmt, Finalize>;

  /// The statement for `sql` on `db`, reset and with its bindings cleared; nullptr with SQLite's
  /// error code in `code` when it does not prepare. Texts past the cap are prepared but not kept,
  /// so an application that builds texts with values inside cannot grow the cache without bound.
  sqlite_api::sqlite3_stmt* get(sqlite_api::sqlite3* db, std::string_view sql, int& code) {
    auto known = statements_.find(sql);
    if (known != statements_.end()) {
      sqlite_api::sqlite3_reset(known->second.get());
      sqlite_api::sqlite3_clear_bindings(known->second.get());
      code = SQLITE_OK;
      return known->second.get();
    }
    sqlite_api::sqlite3_stmt* raw = nullptr;
    code = sqlite_api::sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &raw,
                                          nullptr);
    if (code != SQLITE_OK) {
      sqlite_api::sqlite3_finalize(raw);
      return nullptr;
    }
    if (statements_.size() >= kCap) {
      overflow_.reset(raw);
      return raw;
    }
    return statements_.emplace(std::string(sql), Statement(raw)).first->second.get();
  }

  /// Leaves every statement reset, so none keeps a read transaction or a table lock open.
  void reset_all() noexcept {
    for (auto& [sql, statement] : statements_) sqlite_api::sqlite3_reset(statement.get());
    overflow_.reset();
  }

 private:
  static constexpr std::size_t kCap = 64;
  std::map<std::string, Statement, std::less<>> statements_;
  Statement overflow_;  // the last statement past the cap, finalized when the next one comes
};

}  // namespace dblock::detail
