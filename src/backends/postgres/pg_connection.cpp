#include "backends/postgres/pg_connection.hpp"

#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/scope_exit.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

namespace {

void route_notice(void* logger, const char* message) {
  std::string_view text(message);
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  static_cast<spdlog::logger*>(logger)->debug("server notice: {}", text);
}

std::string trimmed(const char* message) {
  std::string text = message != nullptr ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

/// FNV-1a, 64 bits: a statement's name from its text.
std::uint64_t text_hash(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace

PgStatement::PgStatement(StatementIds& ids, std::string sql_)
    : id(ids.of(sql_)), sql(std::move(sql_)), name(fmt::format("dblock_{:016x}", text_hash(sql))) {}

PgConnection::PgConnection(const std::string& uri, const std::string& redacted_uri,
                           std::chrono::milliseconds connect_timeout, std::chrono::milliseconds statement_timeout,
                           std::shared_ptr<spdlog::logger> logger, std::shared_ptr<PgStatementMode> mode)
    : logger_(std::move(logger)),
      mode_(std::move(mode)),
      redacted_uri_(redacted_uri),
      statement_timeout_(statement_timeout) {
  auto timeout_s = std::to_string(std::max<long long>(2, (connect_timeout.count() + 999) / 1000));
  auto user_timeout_ms = std::to_string(client_tcp_user_timeout(connect_timeout, statement_timeout).count());
  auto idle_s = std::to_string(kCutKeepalivesIdle.count()), interval_s = std::to_string(kCutKeepalivesInterval.count()),
       count = std::to_string(kCutKeepalivesCount);
  // Ours first: later keywords (the URI) override earlier ones, so the user's settings win.
  // read-write: of a multi-host URI's hosts, the writable one (libpq moves on past standbys and
  // read-only sessions); a URI that names target_session_attrs itself decides. The keepalives
  // and tcp_user_timeout: a cut network fails this end's socket (a listener too, which waits
  // without a deadline) instead of leaving it open for hours (doc/guarantees.md, "Cut").
  std::array<const char*, 10> keys{
      "connect_timeout",     "application_name", "target_session_attrs", "keepalives", "keepalives_idle",
      "keepalives_interval", "keepalives_count", "tcp_user_timeout",     "dbname",     nullptr};
  std::array<const char*, 10> values{
      timeout_s.c_str(),       "dblock",    "read-write", "1", idle_s.c_str(), interval_s.c_str(), count.c_str(),
      user_timeout_ms.c_str(), uri.c_str(), nullptr};
  conn_.reset(PQconnectdbParams(keys.data(), values.data(), 1));
  if (!conn_) throw ConnectionError(fmt::format("cannot connect to {}: out of memory", redacted_uri_));
  if (PQstatus(conn_.get()) != CONNECTION_OK) {
    // libpq echoes parts of the connection string (e.g. a malformed %-escape in the password).
    auto message = redact_secrets(trimmed(PQerrorMessage(conn_.get())), uri);
    bool login =
        message.find("authentication failed") != std::string::npos || message.find("password") != std::string::npos;
    bool read_only = message.find("read-only") != std::string::npos;
    throw ConnectionError(
        fmt::format("cannot connect to {}: {}{}", redacted_uri_, message,
                    login ? " (check the user name and password)"
                    : read_only
                        ? " (no host of the URI accepts writes: a hot standby, or default_transaction_read_only "
                          "is on; dblock needs the primary)"
                        : ""),
        login       ? "28P01"
        : read_only ? "25006"
                    : "08001");
  }
  PQsetNoticeProcessor(conn_.get(), route_notice, logger_.get());
  // Lock statements run autocommit at READ COMMITTED whatever the server's default is. Behind a
  // transaction pooler a session setting would land on one server connection only: there the
  // server's default applies, and a serialization failure it causes is retried like any other.
  //
  // The server's end of a cut connection: the server closes it, and so lets go of the session's
  // advisory locks and rolls back its transaction, once nothing has come from this end for
  // kCutServerTimeout (keepalive probes unanswered, or data unacknowledged), however long the
  // network stays cut; a live client's kernel answers the probes, so an idle session (pooled or
  // pinned) never ends for it. One round trip with the SET above. Ignored on a Unix socket.
  // Not behind a transaction pooler (the server connection is not this session's); not on
  // CockroachDB or YugabyteDB, whose settings differ (they have no advisory mode either).
  if (mode_->behind_transaction_pooler()) return;
  std::string setup = "SET default_transaction_isolation = 'read committed'";
  if (reported("crdb_version").empty() && reported("server_version").find("-YB-") == std::string_view::npos)
    setup += server_cut_settings(PQserverVersion(conn_.get()));
  exec(setup);
}

std::string server_cut_settings(int server_version) {
  auto settings = fmt::format(
      "; SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; "
      "SET tcp_keepalives_count = {}",
      kCutKeepalivesIdle.count(), kCutKeepalivesInterval.count(), kCutKeepalivesCount);
  if (server_version >= 120000) settings += fmt::format("; SET tcp_user_timeout = {}", kCutServerTimeout.count());
  return settings;
}

std::string transaction_cut_settings(int server_version) {
  auto settings = fmt::format(
      "set_config('tcp_keepalives_idle', '{}', true), "
      "set_config('tcp_keepalives_interval', '{}', true), "
      "set_config('tcp_keepalives_count', '{}', true)",
      kCutKeepalivesIdle.count(), kCutKeepalivesInterval.count(), kCutKeepalivesCount);
  if (server_version >= 120000)
    settings += fmt::format(", set_config('tcp_user_timeout', '{}', true)", kCutServerTimeout.count());
  return settings;
}

std::chrono::milliseconds client_tcp_user_timeout(std::chrono::milliseconds connect_timeout,
                                                  std::chrono::milliseconds statement_timeout) {
  // Never shorter than a statement or a connect may take (those have their own deadlines), nor than
  // the server's own bound.
  return std::max({kCutServerTimeout, statement_timeout, connect_timeout});
}

bool PgConnection::usable() const noexcept {
  return !abandoned_ && PQstatus(conn_.get()) == CONNECTION_OK && PQtransactionStatus(conn_.get()) == PQTRANS_IDLE;
}

PgResult PgConnection::await(bool sent, std::string_view what, std::chrono::milliseconds longer) {
  if (!sent) fail(nullptr, what);
  // Wait for the reply with a deadline: a stalled server or network must not hang the caller.
  auto allowed = statement_timeout_ + longer;
  auto deadline = std::chrono::steady_clock::now() + allowed;
  if (reply_by_ < deadline) {
    deadline = reply_by_;
    allowed = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  }
  PgResult last;
  PgResult first_error;
  while (true) {
    PGresult* result = next_result(deadline, allowed, what);
    if (result == nullptr) break;
    auto status = PQresultStatus(result);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK && !first_error)
      first_error.reset(result);
    else
      last.reset(result);
  }
  if (first_error) fail(first_error.get(), what);
  if (!last) fail(nullptr, what);
  return last;
}

PGresult* PgConnection::next_result(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds allowed,
                                    std::string_view what) {
  while (PQisBusy(conn_.get()) != 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      abandoned_ = true;  // the reply may still come: this session is never reused
      throw OutcomeUnknown(fmt::format("{}: no reply from {} within {}ms", what, redacted_uri_, allowed.count()),
                           "57014");
    }
    pollfd fd{PQsocket(conn_.get()), POLLIN, 0};
    if (poll(&fd, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) fail(nullptr, what);
    if (PQconsumeInput(conn_.get()) == 0) fail(nullptr, what);
  }
  return PQgetResult(conn_.get());
}

void throw_pg_error(PGconn* conn, const PGresult* result, std::string_view what, std::string_view where) {
  if (result == nullptr || PQstatus(conn) == CONNECTION_BAD) {
    throw OutcomeUnknown(fmt::format("{}: connection to {} broke: {}", what, where, trimmed(PQerrorMessage(conn))),
                         "08006");
  }
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  std::string sqlstate = state != nullptr ? state : "";
  auto message = fmt::format("{}: {}", what, trimmed(PQresultErrorMessage(result)));
  if (sqlstate == "55P03") throw LockWaitTimedOut(message, sqlstate);
  if (sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "26000") throw TransientError(message, sqlstate);
  if (sqlstate == "42P01" || sqlstate == "3F000" || sqlstate == "42883")
    throw SchemaError(SchemaError::Reason::missing,
                      fmt::format("dblock's tables are missing in {} ({}): run `dblock migrate up`", where,
                                  message.substr(0, message.find('\n'))));
  if (starts_with(sqlstate, "08") || starts_with(sqlstate, "57P")) throw ConnectionError(message, sqlstate);
  if (sqlstate == "42501")
    throw PermissionDenied(
        fmt::format("the role dblock connects to {} as lacks a right: {} (`dblock migrate grants "
                    "--role NAME` prints the grants a runtime role needs)",
                    where, message));
  if (sqlstate == "25006")
    throw DatabaseError(fmt::format("{} is read-only (a hot standby, or default_transaction_read_only is on): dblock "
                                    "needs the primary; a multi-host URI finds it unless it sets target_session_attrs "
                                    "itself: {}",
                                    where, message),
                        sqlstate);
  throw DatabaseError(message, sqlstate);
}

void throw_pg_application_error(PGconn* conn, const PGresult* result, std::string_view what, std::string_view where) {
  const char* state =
      result != nullptr && PQstatus(conn) != CONNECTION_BAD ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  std::string_view sqlstate = state != nullptr ? state : "";
  // The states throw_pg_error answers with advice about dblock's own objects or the server it needs.
  if (sqlstate == "42P01" || sqlstate == "3F000" || sqlstate == "42883" || sqlstate == "42501" || sqlstate == "25006")
    throw DatabaseError(fmt::format("{}: {}", what, trimmed(PQresultErrorMessage(result))), sqlstate);
  throw_pg_error(conn, result, what, where);
}

void PgConnection::fail(const PGresult* result, std::string_view what) const {
  if (application_statement_) throw_pg_application_error(conn_.get(), result, what, redacted_uri_);
  throw_pg_error(conn_.get(), result, what, redacted_uri_);
}

PgResult PgConnection::exec_application(const std::string& sql, std::span<const std::string> params) {
  application_statement_ = true;
  ScopeExit restore([this]() noexcept { application_statement_ = false; });
  return exec_params(sql, params);
}

PgResult PgConnection::exec(std::string_view sql) {
  return await(PQsendQuery(conn_.get(), std::string(sql).c_str()) != 0, "statement failed");
}

namespace {
std::vector<const char*> values_of(std::span<const std::string> params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (auto& param : params) values.push_back(param.c_str());
  return values;
}
}  // namespace

PgResult PgConnection::exec_params(const std::string& sql, std::span<const std::string> params) {
  auto values = values_of(params);
  return await(PQsendQueryParams(conn_.get(), sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                                 nullptr, nullptr, 0) != 0,
               "statement failed");
}

PgResult PgConnection::exec_prepared(const PgStatement& statement, std::span<const std::string> params,
                                     std::chrono::milliseconds longer) {
  std::array<const char*, 8> on_stack{};  // every statement of ours has fewer parameters
  std::vector<const char*> on_heap;
  std::span<const char*> values = std::span(on_stack).first(std::min(params.size(), on_stack.size()));
  if (params.size() > on_stack.size()) values = on_heap = std::vector<const char*>(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) values[i] = params[i].c_str();
  return exec_prepared(statement, std::span<const char* const>(values), longer);
}

PgResult PgConnection::exec_prepared(const PgStatement& statement, std::span<const char* const> values,
                                     std::chrono::milliseconds longer) {
  auto count = static_cast<int>(values.size());
  if (mode_->behind_transaction_pooler())
    return await(
        PQsendQueryParams(conn_.get(), statement.sql.c_str(), count, nullptr, values.data(), nullptr, nullptr, 0) != 0,
        "statement failed", longer);
  if (statement.id >= prepared_.size()) prepared_.resize(statement.id + 1, false);
  try {
    if (!prepared_[statement.id]) {
      await(PQsendPrepare(conn_.get(), statement.name.c_str(), statement.sql.c_str(), 0, nullptr) != 0,
            "prepare failed");
      prepared_[statement.id] = true;
    }
    return await(
        PQsendQueryPrepared(conn_.get(), statement.name.c_str(), count, values.data(), nullptr, nullptr, 0) != 0,
        "statement failed", longer);
  } catch (const DatabaseError& e) {
    on_statement_error(e);
  }
}

void PgConnection::on_statement_error(const DatabaseError& e) {
  // Nobody else prepares or deallocates on this session: a statement that is already there, or
  // gone, was prepared on another server connection. Neither error ran anything.
  std::string_view state = e.sqlstate();
  if (state != "42P05" && state != "26000") throw;  // called inside the handler of `e`
  prepared_.assign(prepared_.size(), false);
  if (mode_->detect_transaction_pooler())
    logger_->warn(
        "{}: named prepared statements do not survive between statements ({}): a pooler in transaction "
        "mode sits in between; sending statements unnamed from now on. Add pool_mode=transaction to the "
        "URI to say so up front (waiters then poll instead of listening)",
        redacted_uri_, state);
  throw PoolerDetected(e.what(), e.sqlstate());
}

std::string pg_text_array(std::span<const std::string_view> items) {
  std::string out = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace dblock::detail
