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

namespace sql {
class Connection;
class PreparedStatement;
class ResultSet;
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

/// A statement the backend prepares lazily, once per session.
struct MyStatement {
  std::size_t id;
  const char* name;  // for error messages
  std::string sql;
};

using MyParam = std::variant<std::string_view, std::int64_t, double>;

struct MyResultDeleter {
  void operator()(sql::ResultSet* result) const noexcept;
};
using MyResult = std::unique_ptr<sql::ResultSet, MyResultDeleter>;

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

  /// A prepared query: its result set (every column read as needed by the caller).
  MyResult query(const MyStatement& statement, std::span<const MyParam> params);
  /// A prepared statement without a result set: the rows it changed.
  std::uint64_t update(const MyStatement& statement, std::span<const MyParam> params);
  /// One statement as plain text, no parameters (DDL).
  void execute(const std::string& sql);
  /// The same as a query, for text without parameters (admin and migration statements).
  MyResult query_text(const std::string& sql);

 private:
  sql::PreparedStatement& prepared(const MyStatement& statement, std::span<const MyParam> params);
  /// Throws the dblock exception for a driver error; marks the session broken when it is.
  [[noreturn]] void fail(const sql::SQLException& error, std::string_view what);
  template <class Fn>
  auto guarded(std::string_view what, Fn&& fn);

  std::unique_ptr<sql::Connection> conn_;
  std::vector<std::unique_ptr<sql::PreparedStatement>> prepared_;
  std::string redacted_uri_;
  std::chrono::milliseconds statement_timeout_;
  bool broken_ = false;
};

/// Reads a column as text / integer; empty when SQL NULL.
[[nodiscard]] std::optional<std::string> text_at(sql::ResultSet& result, unsigned column);
[[nodiscard]] std::optional<std::int64_t> int64_at(sql::ResultSet& result, unsigned column);

}  // namespace dblock::detail
