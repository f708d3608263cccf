#pragma once
// One MySQL Connector/C++ session: RAII ownership of the connection and of its prepared
// statements (prepared once per session), a reply deadline through the client's read timeout, and
// the translation of driver errors into dblock exceptions.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <spdlog/fwd.h>

#include "backends/statement_ids.hpp"

namespace sql {
class Connection;
class PreparedStatement;
class SQLException;
}  // namespace sql

namespace dblock::detail {

/// Where and how to connect, parsed from `mysql://user:pw@host:port/db?socket=/path`.
struct MyEndpoint {
  std::string host_name;  // Connector/C++ form: tcp://host:port or unix:///path
  std::string user;
  std::string password;
  std::string database;
};

/// @throws InvalidArgument naming the (redacted) URI and the problem.
[[nodiscard]] MyEndpoint parse_mysql_uri(std::string_view driver_uri, std::string_view redacted);

/// A statement the backend prepares lazily, once per session. A session caches the statements of
/// every set it runs side by side, by id: the id comes from the backend's registry, one per text.
struct MyStatement {
  MyStatement() = default;
  MyStatement(StatementIds& ids, const char* name_, std::string sql_)
      : id(ids.of(sql_)), name(name_), sql(std::move(sql_)) {}
  std::size_t id = 0;
  const char* name = "";  // for error messages
  std::string sql;
};

using MyParam = std::variant<std::string_view, std::int64_t, double>;

/// One row of a result, read completely while the session was ours: a result set of Connector/C++
/// still reads from its connection, which may serve another thread once back in the pool.
class MyRow {
 public:
  explicit MyRow(std::vector<std::optional<std::string>> cells) : cells_(std::move(cells)) {}
  /// Columns count from 0. Empty when SQL NULL.
  [[nodiscard]] const std::optional<std::string>& text(std::size_t column) const { return cells_.at(column); }
  [[nodiscard]] std::optional<std::int64_t> int64(std::size_t column) const;
  /// NULL reads as "" and 0.
  [[nodiscard]] std::string str(std::size_t column) const { return text(column).value_or(""); }
  [[nodiscard]] std::int64_t num(std::size_t column) const { return int64(column).value_or(0); }
  [[nodiscard]] std::size_t size() const noexcept { return cells_.size(); }

 private:
  std::vector<std::optional<std::string>> cells_;
};
using MyRows = std::vector<MyRow>;

/// The first column of the first row, when there is a row and it is not NULL.
[[nodiscard]] inline std::optional<std::int64_t> first_int64(const MyRows& rows) {
  return rows.empty() ? std::nullopt : rows.front().int64(0);
}

class MyConnection {
 public:
  /// @throws ConnectionError (the message names `redacted_uri`, never the password).
  MyConnection(const MyEndpoint& endpoint, std::string redacted_uri, std::chrono::milliseconds connect_timeout,
               std::chrono::milliseconds statement_timeout);
  ~MyConnection();
  MyConnection(const MyConnection&) = delete;
  MyConnection& operator=(const MyConnection&) = delete;

  /// Not broken and never abandoned: fit to go back to a pool.
  [[nodiscard]] bool usable() const noexcept { return !broken_; }
  /// Never hand this session back to a pool (its server-side state cannot be trusted).
  void abandon() noexcept { broken_ = true; }
  [[nodiscard]] std::chrono::milliseconds statement_timeout() const noexcept { return statement_timeout_; }

  /// A prepared query: every row of its result.
  MyRows query(const MyStatement& statement, std::span<const MyParam> params);
  /// A prepared CALL of a procedure that answers one result set: its rows, with the CALL's
  /// trailing status read too, so the session can run its next statement.
  MyRows call(const MyStatement& statement, std::span<const MyParam> params);
  /// A prepared statement without a result set: the rows it changed.
  std::uint64_t update(const MyStatement& statement, std::span<const MyParam> params);
  /// One statement as plain text, no parameters (DDL).
  void execute(const std::string& sql);

  /// While the returned guard lives, the statements run are the application's (a fenced
  /// transaction's work): a failure is the server's message and SQLSTATE as a DatabaseError, never
  /// dblock's advice about its own tables, grants or the writable server (a missing table or a
  /// right lacking is the application's); a broken session and a transient failure as for dblock's.
  class ApplicationStatements {
   public:
    explicit ApplicationStatements(MyConnection& connection) : connection_(connection) {
      connection_.application_statement_ = true;
    }
    ~ApplicationStatements() { connection_.application_statement_ = false; }
    ApplicationStatements(const ApplicationStatements&) = delete;
    ApplicationStatements& operator=(const ApplicationStatements&) = delete;

   private:
    MyConnection& connection_;
  };
  [[nodiscard]] ApplicationStatements application_statements() { return ApplicationStatements(*this); }

 private:
  sql::PreparedStatement& prepared(const MyStatement& statement, std::span<const MyParam> params);
  /// Throws the dblock exception for a driver error; marks the session broken when it is.
  [[noreturn]] void fail(const sql::SQLException& error, std::string_view what);
  /// fail() for the application's statements (ApplicationStatements).
  [[noreturn]] void fail_application(const sql::SQLException& error, std::string_view what);
  template <class Fn>
  auto guarded(std::string_view what, Fn&& fn);

  std::unique_ptr<sql::Connection> conn_;
  std::vector<std::unique_ptr<sql::PreparedStatement>> prepared_;  // by MyStatement::id
  std::vector<std::string> prepared_sql_;                          // what each was prepared from
  std::string redacted_uri_;
  std::chrono::milliseconds statement_timeout_;
  bool broken_ = false;
  bool application_statement_ = false;
};

}  // namespace dblock::detail
