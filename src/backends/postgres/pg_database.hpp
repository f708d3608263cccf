#pragma once
// What every PostgreSQL role of one store shares: the installation's names, its statement sets
// (built on one StatementIds, so that one session can run them all), the pooler mode found out at
// run time, the session pool and the engine it reached. It implements no role: pg_backend.cpp
// hands out one object per role, each built on this.

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/backend_settings.hpp"
#include "backends/lock_backend.hpp"
#include "backends/postgres/pg_advisory.hpp"
#include "backends/postgres/pg_connection.hpp"
#include "backends/postgres/pg_sql.hpp"
#include "backends/session_pool.hpp"
#include "backends/statement_ids.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

struct PgDatabase {
  /// Opens the first session: proves the server and the credentials now, not at first use.
  /// @throws ConnectionError when it fails.
  PgDatabase(const StoreUri& uri, const BackendSettings& settings);

  [[nodiscard]] bool behind_transaction_pooler() const noexcept { return mode->behind_transaction_pooler(); }

  std::string schema;
  std::string prefix;
  std::string driver_uri;
  std::int32_t key;
  std::string channel;  // the release notifications'
  StatementIds ids;     // before every statement set: all of them share its ids
  PgSql sql;
  PgAdvisorySql advisory_sql;
  std::shared_ptr<PgStatementMode> mode;
  bool session_pooler;  // pool_mode=session: a pooler that keeps one server process per session
  SessionPool<PgConnection> pool;
  PgEngine engine = PgEngine::postgresql;
};

/// One statement of table mode. When it meets a transaction pooler it did not run, and goes out
/// again unnamed (the mode has switched): a fallback of the protocol, not a retry.
template <class Params>
PgResult run_table_statement(PgConnection& session, const PgStatement& statement, const Params& params) {
  try {
    return session.exec_prepared(statement, params);
  } catch (const PoolerDetected&) {
    return session.exec_prepared(statement, params);
  }
}

/// A renewal of plain locks or of group members (`with_kinds`), its reply bounded by `reply_by`;
/// the positions in `held` renewed.
[[nodiscard]] Renewal pg_renew(PgDatabase& database, const PgStatement& statement, std::span<const HeldRef> held,
                               bool with_kinds, std::chrono::steady_clock::time_point reply_by);

}  // namespace dblock::detail
