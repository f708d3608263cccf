#pragma once
// One libpq session: RAII ownership of PGconn, statements prepared once per session, replies
// awaited with a deadline, and the translation of libpq failures into dblock exceptions.

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/fwd.h>

#include "backends/backend_errors.hpp"
#include "backends/statement_ids.hpp"

namespace dblock::detail {

/// The one translation of a failed libpq statement into a dblock exception, for dblock's sessions
/// and the application's connection alike: transient (40001, 40P01, 55P03, 26000), schema missing,
/// connection, permission (42501), read-only (25006) or any other DatabaseError. `where` names the
/// server in messages (a redacted URI).
[[noreturn]] void throw_pg_error(PGconn* conn, const PGresult* result, std::string_view what, std::string_view where);
/// The translation of a failed statement the application wrote (a fenced transaction's work): the
/// server's message and SQLSTATE as a DatabaseError, never dblock's advice about its own tables,
/// grants or primary (a missing table or a right lacking is the application's); a broken
/// connection, a transient failure and a lock wait timed out as throw_pg_error has them.
[[noreturn]] void throw_pg_application_error(PGconn* conn, const PGresult* result, std::string_view what,
                                             std::string_view where);

struct PgResultDeleter {
  void operator()(PGresult* result) const noexcept { PQclear(result); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

/// A statement the backend prepares lazily, once per session, under a name drawn from its text:
/// behind a transaction pooler a server connection may hold another client's statements, and one
/// of the same name is then the same statement, never another installation's. Its id (the slot of
/// a session's cache) comes from the backend's registry: one per text.
struct PgStatement {
  PgStatement() = default;
  PgStatement(StatementIds& ids, std::string sql);
  std::size_t id = 0;
  std::string sql;
  std::string name;
};

/// How a backend's sessions send statements, shared by all of them. Named prepared statements
/// live on one server connection; behind a pooler in transaction mode (PgBouncer
/// pool_mode=transaction) every statement may run on another one, so they are sent with their
/// text each time (the unnamed statement of one Parse/Bind/Execute/Sync, which the pooler keeps
/// together) and nothing else may rely on session state either. Set from the URI, or the first time
/// a named statement turns out missing or already present on the server connection.
class PgStatementMode {
 public:
  explicit PgStatementMode(bool transaction_pooler) : pooled_(transaction_pooler) {}
  [[nodiscard]] bool behind_transaction_pooler() const noexcept { return pooled_.load(std::memory_order_relaxed); }
  /// True the first time: the caller reports it.
  bool detect_transaction_pooler() noexcept { return !pooled_.exchange(true, std::memory_order_relaxed); }

 private:
  std::atomic<bool> pooled_;
};

/// A named statement was missing on the server connection, or already there (42P05, 26000): a
/// transaction pooler sits in between. Nothing ran; the statement mode is unnamed from now on.
class PoolerDetected : public TransientError {
 public:
  using TransientError::TransientError;
};

/// A cut network's bound (doc/guarantees.md, "Cut"): both ends probe a connection idle this long
/// every interval, and give it up after count unanswered probes or when data sent stays
/// unacknowledged for kCutServerTimeout; the server so ends a cut session, and with it its
/// advisory locks and open transaction, at most kCutServerTimeout (plus a probe interval) after
/// the last packet it received. A live peer's kernel answers probes: idle sessions never end for it.
inline constexpr std::chrono::seconds kCutKeepalivesIdle{2};
inline constexpr std::chrono::seconds kCutKeepalivesInterval{1};
inline constexpr int kCutKeepalivesCount = 3;
inline constexpr std::chrono::milliseconds kCutServerTimeout{5000};
/// The session settings, each after a "; ", that put the bound on the server's end of a session
/// (PostgreSQL `server_version`, as PQserverVersion reports it: tcp_user_timeout needs 12).
[[nodiscard]] std::string server_cut_settings(int server_version);
/// The same as set_config(..., true) calls, comma-separated: for the rest of a transaction.
[[nodiscard]] std::string transaction_cut_settings(int server_version);
/// libpq's tcp_user_timeout for this end: the bound, never shorter than a connect or a statement.
[[nodiscard]] std::chrono::milliseconds client_tcp_user_timeout(std::chrono::milliseconds connect_timeout,
                                                                std::chrono::milliseconds statement_timeout);

/// The engine behind a PostgreSQL-protocol server, told by what it reports at connect: CockroachDB
/// sends a crdb_version parameter, YugabyteDB's server_version carries "-YB-".
enum class PgEngine { postgresql, cockroachdb, yugabytedb };
[[nodiscard]] inline PgEngine pg_engine_of(std::string_view server_version, std::string_view crdb_version) noexcept {
  if (!crdb_version.empty()) return PgEngine::cockroachdb;
  if (server_version.find("-YB-") != std::string_view::npos) return PgEngine::yugabytedb;
  return PgEngine::postgresql;
}

class PgConnection {
 public:
  /// @throws ConnectionError (message names `redacted_uri`, never the password).
  PgConnection(const std::string& uri, const std::string& redacted_uri, std::chrono::milliseconds connect_timeout,
               std::chrono::milliseconds statement_timeout, std::shared_ptr<spdlog::logger> logger,
               std::shared_ptr<PgStatementMode> mode);

  /// Connected, not inside a transaction, no reply outstanding: fit to go back to a pool.
  [[nodiscard]] bool usable() const noexcept;
  [[nodiscard]] PGconn* raw() const noexcept { return conn_.get(); }
  /// A parameter the server reported at connect (server_version, ...); empty when it sent none.
  [[nodiscard]] std::string_view reported(const char* parameter) const noexcept {
    const char* value = PQparameterStatus(conn_.get(), parameter);
    return value != nullptr ? std::string_view(value) : std::string_view();
  }

  /// Simple-query protocol: may hold several statements (migrations).
  PgResult exec(std::string_view sql);
  PgResult exec_params(const std::string& sql, std::span<const std::string> params);
  /// `longer`: how much longer than the statement timeout the reply may take (a server-side wait).
  /// @throws PoolerDetected (see there); nothing ran then.
  PgResult exec_prepared(const PgStatement& statement, std::span<const std::string> params,
                         std::chrono::milliseconds longer = std::chrono::milliseconds(0));
  /// The same with the parameters as C strings, for callers that format them without allocating.
  PgResult exec_prepared(const PgStatement& statement, std::span<const char* const> values,
                         std::chrono::milliseconds longer = std::chrono::milliseconds(0));
  /// One statement of exec_pipelined: a prepared one (named unless behind a transaction pooler), or
  /// `text` sent unnamed when `statement` is null.
  struct Pipelined {
    const PgStatement* statement = nullptr;
    const char* text = nullptr;
    std::span<const char* const> values;
  };
  /// Sends `statements` together, one round trip (libpq pipeline mode; the prepares a session still
  /// lacks go along), and returns their results in order. After a failed one the rest do not run;
  /// its error is thrown as by exec_prepared, with its index in `failed_at`. The session leaves
  /// pipeline mode before this returns or throws, or is abandoned (no reply in time, connection lost).
  std::vector<PgResult> exec_pipelined(std::span<const Pipelined> statements, std::size_t& failed_at);
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
  /// exec_params for a statement the application wrote: its failure is translated by
  /// throw_pg_application_error.
  PgResult exec_application(const std::string& sql, std::span<const std::string> params);

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
  /// The next PQgetResult once it will not block, until `deadline` (then the session is abandoned).
  PGresult* next_result(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds allowed,
                        std::string_view what);
  /// Inside the handler of `e`: a named statement missing or already there (42P05, 26000) throws
  /// PoolerDetected; anything else is rethrown.
  [[noreturn]] void on_statement_error(const DatabaseError& e);

  struct ConnDeleter {
    void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
  };
  std::shared_ptr<spdlog::logger> logger_;
  std::shared_ptr<PgStatementMode> mode_;
  std::unique_ptr<PGconn, ConnDeleter> conn_;
  std::string redacted_uri_;
  std::chrono::milliseconds statement_timeout_;
  std::vector<bool> prepared_;  // by PgStatement::id
  bool abandoned_ = false;
  std::chrono::steady_clock::time_point reply_by_ = std::chrono::steady_clock::time_point::max();
  std::int64_t server_pid_ = 0;
  bool application_statement_ = false;  // exec_application's: fail() translates as the application's
};

/// `{"a","b\"c"}`: a text[] literal with every element quoted, so NULL, commas and braces in
/// names stay data.
[[nodiscard]] std::string pg_text_array(std::span<const std::string_view> items);

}  // namespace dblock::detail
