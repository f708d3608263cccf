#include "backends/postgres/pg_advisory.hpp"

#include <array>
#include <charconv>

#include <fmt/format.h>

#include "backends/postgres/pg_database.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

std::int64_t int64_at(const PGresult* result, int column) {
  const char* text = PQgetvalue(result, 0, column);
  std::int64_t value = 0;
  std::from_chars(text, text + PQgetlength(result, 0, column), value);
  return value;
}

std::optional<std::int64_t> token_at(const PGresult* result) {
  if (PQntuples(result) != 1 || PQgetisnull(result, 0, 0) != 0) return std::nullopt;
  return int64_at(result, 0);
}

std::string key_arguments(bool two_part) { return two_part ? "$1::integer, $2::integer" : "$1::bigint"; }

class PgAdvisorySession final : public AdvisorySession {
 public:
  PgAdvisorySession(SessionPool<PgConnection>::Lease lease, const PgAdvisorySql& sql, PgStatementMode& mode,
                    bool session_pooler)
      : lease_(std::move(lease)),
        sql_(sql),
        mode_(mode),
        // A pooler's login reports a pid of its own (PgBouncer: a random cancel key), PostgreSQL
        // the server process's: so this is known before the first statement, whichever server
        // connection a transaction pooler would run it on.
        server_pid_(session_pooler ? 0 : PQbackendPID(lease_->raw())) {}

  ~PgAdvisorySession() override {
    if (grants_ == 0 && !grant_in_doubt_) return;
    try {  // nothing of ours may stay locked on a session the pool hands to someone else
      lease_->exec("SELECT pg_advisory_unlock_all()");
    } catch (...) {
      lease_->abandon();
    }
  }

  PgAdvisorySession(const PgAdvisorySession&) = delete;
  PgAdvisorySession& operator=(const PgAdvisorySession&) = delete;

  std::optional<std::int64_t> lock(const AdvisoryTarget& target, milliseconds wait) override {
    // The statement takes the lock only on server_pid_: a lock a transaction pooler let another
    // server process take could never be reached again.
    auto result = [&] {
      try {
        return wait.count() == 0
                   ? run(sql_.try_lock(target, false), PgKeyParams(target.key).with_pid(server_pid_).values())
                   : run(sql_.wait(false), PgAdvisorySql::wait_params(target, false, wait, server_pid_), wait);
      } catch (...) {
        // It may have been granted before it failed (the token's draw, a cancel at the grant), and
        // the count cannot say: the session is cleaned up whatever the count when it goes back.
        grant_in_doubt_ = true;
        throw;
      }
    }();
    // Counted before the pid check: a grant through a pooler must still be cleaned up if it can be.
    auto token = token_at(result.get());
    if (token) ++grants_;
    require_same_server_process(result.get());
    return token;
  }

  bool unlock(const AdvisoryTarget& target) override {
    auto result = run(sql_.unlock(target), PgKeyParams(target.key).values());
    require_same_server_process(result.get());
    bool was_held = PQgetvalue(result.get(), 0, 0)[0] == 't';
    if (was_held) --grants_;
    return was_held;
  }

  void check_alive() override { require_same_server_process(run(sql_.pid(), std::span<const char* const>()).get()); }

  std::int64_t draw_token() override {
    auto result = run(sql_.draw(), std::span<const char* const>());
    require_same_server_process(result.get());
    return int64_at(result.get(), 0);
  }

 private:
  template <class Params>
  PgResult run(const PgStatement& statement, const Params& params, milliseconds longer = milliseconds(0)) {
    try {
      return lease_->exec_prepared(statement, params, longer);
    } catch (const PoolerDetected& e) {
      refuse_pooler(std::string_view(e.sqlstate()) == "26000" ? "a statement prepared on it vanished"
                                                              : "a statement not yet prepared on it was there already");
    }
  }

  /// A ConnectionError: this session cannot reach the server process that holds its locks. The
  /// backend is told, so that no later session is pinned (an acquisition retrying connection
  /// errors until its deadline gets InvalidArgument at its next try, not a timeout).
  [[noreturn]] void refuse_pooler(std::string_view sign) {
    lease_->abandon();
    mode_.detect_transaction_pooler();
    throw ConnectionError(fmt::format(
        "advisory mode: the server process behind one connection is not the one it was ({}). A pooler in "
        "transaction mode (e.g. PgBouncer pool_mode=transaction) sits in between, and session advisory locks cannot "
        "work through it: connect advisory mode to PostgreSQL directly or through a session-mode pool (and say so "
        "with pool_mode=session in the URI: a pooler's login reports a server process of its own)",
        sign));
  }

  /// Session locks belong to one server process. A pooler in transaction mode (PgBouncer
  /// pool_mode=transaction) runs each statement on whichever server connection is free, so a lock
  /// taken there belongs to nobody we can reach: refuse, loudly, at the first sign.
  /// Every advisory statement also returns pg_backend_pid(), so the check costs no round trip.
  void require_same_server_process(const PGresult* result) {
    auto pid = int64_at(result, PQnfields(result) - 1);
    if (server_pid_ != 0 && pid != server_pid_) {
      refuse_pooler(confirmed_ ? fmt::format("now pid {}", pid)
                               : fmt::format("the connection logged in to pid {}, its statement ran on pid {}",
                                             server_pid_, pid));
    }
    if (!lease_->same_server_process(pid)) refuse_pooler(fmt::format("now pid {}", pid));
    server_pid_ = pid;
    confirmed_ = true;
  }

  SessionPool<PgConnection>::Lease lease_;
  const PgAdvisorySql& sql_;
  PgStatementMode& mode_;
  std::int64_t server_pid_;      // the server process every lock statement must run on; 0: the next reply's
  bool confirmed_ = false;       // a reply came from server_pid_
  std::int64_t grants_ = 0;      // server-side grants not yet unlocked
  bool grant_in_doubt_ = false;  // a lock statement failed: it may have left a grant the count misses
};

}  // namespace

PgAdvisorySql::PgAdvisorySql(StatementIds& ids, std::string_view schema, std::string_view prefix) {
  auto fill = [&](std::string_view sql) { return detail::fill(sql, {{"{schema}", schema}, {"{prefix}", prefix}}); };
  auto token = fill(R"(nextval('"{schema}"."{prefix}token_seq"'))");
  // Variants in the order of variant(): bigint exclusive, bigint shared, pair exclusive, pair shared.
  for (bool two_part : {false, true}) {
    for (bool shared : {false, true}) {
      auto suffix = shared ? "_shared" : "";
      auto args = key_arguments(two_part);
      // The session lock's token is drawn when first asked for (draw()); a transaction lock's
      // with the lock (CASE evaluates in order: only once the lock is ours).
      auto pid = two_part ? "$3::integer" : "$2::integer";
      try_session_.push_back(
          {ids, fmt::format("SELECT CASE WHEN ({0} = 0 OR {0} = pg_backend_pid()) AND pg_try_advisory_lock{1}({2}) "
                            "THEN 0 END, pg_backend_pid()",
                            pid, suffix, args)});
      try_xact_.push_back(
          {ids, fmt::format("SELECT CASE WHEN pg_try_advisory_xact_lock{}({}) THEN {} END, pg_backend_pid()", suffix,
                            args, token)});
      unlock_.push_back({ids, fmt::format("SELECT pg_advisory_unlock{}({}), pg_backend_pid()", suffix, args)});
    }
  }
  wait_ = {ids, fill(R"(SELECT "{schema}"."{prefix}advisory_lock"($1::bigint, $2::integer, $3::integer, $4::boolean,
  $5::boolean, $6::boolean, $7::bigint), pg_backend_pid())")};
  pid_ = {ids, "SELECT pg_backend_pid()"};
  draw_ = {ids, fmt::format("SELECT {}, pg_backend_pid()", token)};
  wait_session_ = {ids, fill(R"(SELECT CASE WHEN $8::integer = 0 OR $8::integer = pg_backend_pid() THEN
  "{schema}"."{prefix}advisory_lock"($1::bigint, $2::integer, $3::integer, $4::boolean, $5::boolean, $6::boolean,
  $7::bigint) END, pg_backend_pid())")};
}

const PgStatement& PgAdvisorySql::try_lock(const AdvisoryTarget& target, bool xact) const {
  return (xact ? try_xact_ : try_session_)[variant(target)];
}

const PgStatement& PgAdvisorySql::unlock(const AdvisoryTarget& target) const { return unlock_[variant(target)]; }

PgKeyParams::PgKeyParams(const AdvisoryKey& key) noexcept {
  if (key.two_part()) {
    put(key.first());
    put(key.second());
  } else {
    put(key.key());
  }
}

void PgKeyParams::put(std::int64_t value) noexcept {
  auto& text = text_[count_];
  *std::to_chars(text.data(), text.data() + text.size() - 1, value).ptr = '\0';  // 20 characters at most
  values_[count_++] = text.data();
}

std::vector<std::string> PgAdvisorySql::wait_params(const AdvisoryTarget& target, bool xact,
                                                    std::chrono::milliseconds wait, std::int64_t pid) {
  auto flag = [](bool value) { return std::string(value ? "t" : "f"); };
  std::vector<std::string> params{std::to_string(target.key.key()),
                                  std::to_string(target.key.first()),
                                  std::to_string(target.key.second()),
                                  flag(target.key.two_part()),
                                  flag(target.shared),
                                  flag(xact),
                                  std::to_string(wait.count())};
  if (!xact) params.push_back(std::to_string(pid));
  return params;
}

std::unique_ptr<AdvisorySession> make_pg_advisory_session(SessionPool<PgConnection>::Lease lease,
                                                          const PgAdvisorySql& sql, PgStatementMode& mode,
                                                          bool session_pooler) {
  return std::make_unique<PgAdvisorySession>(std::move(lease), sql, mode, session_pooler);
}

std::optional<std::int64_t> pg_xact_lock(PGconn* conn, const PgAdvisorySql& sql, const AdvisoryTarget& target,
                                         std::chrono::milliseconds wait) {
  if (conn == nullptr) throw InvalidArgument("xact lock: the connection is a null pointer");
  if (PQstatus(conn) != CONNECTION_OK) throw ConnectionError("xact lock: the connection is not open");
  switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
      break;
    case PQTRANS_IDLE:
      throw InvalidArgument(
          "xact lock: the connection has no open transaction (a transaction-scoped lock would be "
          "released at once): run BEGIN first");
    case PQTRANS_INERROR:
      throw InvalidArgument("xact lock: the connection's transaction has already failed: roll it back first");
    default:
      throw InvalidArgument("xact lock: the connection is busy with another statement");
  }
  // Unnamed statements: nothing is left prepared on the application's connection. The same
  // statement bounds a cut connection's hold on the lock as dblock's own sessions are bounded
  // (server_cut_settings), local to the transaction: its end restores the connection's settings.
  auto exec = [&](const PgStatement& statement, std::span<const char* const> values) {
    auto sql = fmt::format("SELECT locked.* FROM (SELECT {}) AS cut, LATERAL ({}) AS locked",
                           transaction_cut_settings(PQserverVersion(conn)), statement.sql);
    return PgResult(
        PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0));
  };
  PgResult result;
  if (wait.count() == 0) {
    result = exec(sql.try_lock(target, true), PgKeyParams(target.key).values());
  } else {
    auto params = PgAdvisorySql::wait_params(target, true, wait);
    std::vector<const char*> values;
    for (auto& param : params) values.push_back(param.c_str());
    result = exec(sql.wait(true), values);
  }
  if (!result || PQresultStatus(result.get()) != PGRES_TUPLES_OK)
    throw_pg_error(conn, result.get(), "xact lock", "the database of the application's connection");
  return token_at(result.get());
}

std::optional<std::string> pg_advisory_refusal(const PgDatabase& database) {
  if (database.engine != PgEngine::postgresql)
    return fmt::format(
        "{} speaks PostgreSQL's protocol, but its advisory lock functions were no-ops or not "
        "cluster-wide in released versions: advisory mode is refused there. Use LockMode::table",
        database.engine == PgEngine::cockroachdb ? "CockroachDB" : "YugabyteDB");
  if (!database.behind_transaction_pooler()) return std::nullopt;
  return "advisory mode cannot work behind a pooler in transaction mode (pool_mode=transaction): session advisory "
         "locks belong to one server connection, and the pooler runs each statement on whichever is free. Connect "
         "advisory mode to PostgreSQL directly or through a session-mode pool (with pool_mode=session in the URI), "
         "or use LockMode::table";
}

namespace {

class PgAdvisory final : public AdvisoryBackend {
 public:
  explicit PgAdvisory(PgDatabase& database) : database_(database) {}

  // PostgreSQL bounds a cut session by itself (keepalives and tcp_user_timeout on every session,
  // pg_connection.hpp): an idle session is never ended for silence.
  std::unique_ptr<AdvisorySession> pin_advisory_session(milliseconds /*silence*/) override {
    if (auto why = pg_advisory_refusal(database_)) throw InvalidArgument(*why);
    return make_pg_advisory_session(database_.pool.lease(), database_.advisory_sql, *database_.mode,
                                    database_.session_pooler);
  }
  milliseconds longest_server_wait() const override { return kPgAdvisoryWaitSlice; }
  void on_pool_dry(std::weak_ptr<const std::function<void()>> give_back) override {
    database_.pool.add_reclaimer(std::move(give_back));
  }

 private:
  PgDatabase& database_;
};

class PgXactLockRole final : public PgXactLocks {
 public:
  explicit PgXactLockRole(const PgAdvisorySql& sql) : sql_(sql) {}
  std::optional<std::int64_t> xact_lock(pg_conn* conn, const AdvisoryTarget& target, milliseconds wait) override {
    return pg_xact_lock(conn, sql_, target, wait);
  }

 private:
  const PgAdvisorySql& sql_;
};

}  // namespace

std::unique_ptr<AdvisoryBackend> make_pg_advisory(PgDatabase& database) {
  return std::make_unique<PgAdvisory>(database);
}

std::unique_ptr<PgXactLocks> make_pg_xact_locks(const PgDatabase& database) {
  return std::make_unique<PgXactLockRole>(database.advisory_sql);
}

}  // namespace dblock::detail
