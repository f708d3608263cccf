#pragma once
// One libpq session: RAII ownership of PGconn, statements prepared once per session, replies
// awaited with a deadline, and the translation of libpq failures into dblock exceptions.

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/fwd.h>

namespace dblock::detail {

struct PgResultDeleter {
  void operator()(PGresult* result) const noexcept { PQclear(result); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

/// A statement the backend prepares lazily, once per session.
struct PgStatement {
  std::size_t id;
  std::string sql;
};

class PgConnection {
 public:
  /// @throws ConnectionError (message names `redacted_uri`, never the password).
  PgConnection(const std::string& uri, const std::string& redacted_uri, std::chrono::milliseconds connect_timeout,
               std::chrono::milliseconds statement_timeout, std::shared_ptr<spdlog::logger> logger);

  /// Connected, not inside a transaction, no reply outstanding: fit to go back to a pool.
  [[nodiscard]] bool usable() const noexcept;
  [[nodiscard]] PGconn* raw() const noexcept { return conn_.get(); }

  /// Simple-query protocol: may hold several statements (migrations).
  PgResult exec(std::string_view sql);
  PgResult exec_params(const std::string& sql, std::span<const std::string> params);
  /// `longer`: how much longer than the statement timeout the reply may take (a server-side wait).
  PgResult exec_prepared(const PgStatement& statement, std::span<const std::string> params,
                         std::chrono::milliseconds longer = std::chrono::milliseconds(0));
  /// The same with the parameters as C strings, for callers that format them without allocating.
  PgResult exec_prepared(const PgStatement& statement, std::span<const char* const> values,
                         std::chrono::milliseconds longer = std::chrono::milliseconds(0));
  /// Until the returned guard goes, every reply is awaited until `by` at most (or the statement
  /// timeout, whichever comes first).
  class ReplyLimit {
   public:
    ReplyLimit(PgConnection& connection, std::chrono::steady_clock::time_point by) : connection_(connection) {
      connection_.reply_by_ = by;
    }
    ~ReplyLimit() { connection_.reply_by_ = std::chrono::steady_clock::time_point::max(); }
    ReplyLimit(const ReplyLimit&) = delete;
    ReplyLimit& operator=(const ReplyLimit&) = delete;

   private:
    PgConnection& connection_;
  };
  [[nodiscard]] ReplyLimit limit_replies(std::chrono::steady_clock::time_point by) { return ReplyLimit(*this, by); }

  /// Never hand this session back to a pool (its server-side state cannot be trusted).
  void abandon() noexcept { abandoned_ = true; }
  /// Remembers the first server process id reported on this session; false when `pid` is another
  /// one (a pooler in transaction mode moved the session between server processes).
  bool same_server_process(std::int64_t pid) noexcept {
    if (server_pid_ == 0) server_pid_ = pid;
    return server_pid_ == pid;
  }

  /// Throws the dblock exception for a failed result (or a broken session when result is null).
  [[noreturn]] void fail(const PGresult* result, std::string_view what) const;

 private:
  /// Collects the reply of what was just sent (`sent` false: sending failed), waiting at most the
  /// statement timeout; throws the dblock exception for an error.
  PgResult await(bool sent, std::string_view what, std::chrono::milliseconds longer = std::chrono::milliseconds(0));

  struct ConnDeleter {
    void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
  };
  std::shared_ptr<spdlog::logger> logger_;
  std::unique_ptr<PGconn, ConnDeleter> conn_;
  std::string redacted_uri_;
  std::chrono::milliseconds statement_timeout_;
  std::vector<bool> prepared_;
  bool abandoned_ = false;
  std::chrono::steady_clock::time_point reply_by_ = std::chrono::steady_clock::time_point::max();
  std::int64_t server_pid_ = 0;
};

/// `{"a","b\"c"}`: a text[] literal with every element quoted, so NULL, commas and braces in
/// names stay data.
[[nodiscard]] std::string pg_text_array(std::span<const std::string_view> items);

}  // namespace dblock::detail
