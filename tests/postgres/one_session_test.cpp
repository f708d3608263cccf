// Every PostgreSQL statement set on one session (a store with pool=1), twice over: table mode,
// groups, combined statements, migrations, occurrence records, a fenced transaction, the reaper,
// the bench floor, advisory mode's every variant and a transaction-scoped lock. A session caches
// its prepared statements by id, so two texts under one id would run the wrong one and fail here.

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>
#include <dblock/postgres.hpp>

#include "support/every_statement_set.hpp"
#include "support/installation.hpp"
#include "support/pg_connection.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

/// Runs `sql` on the application's connection; its first value, "" when it has none.
std::string value(PGconn* conn, const std::string& sql) {
  std::unique_ptr<PGresult, decltype(&PQclear)> result(PQexec(conn, sql.c_str()), &PQclear);
  auto status = PQresultStatus(result.get());
  EXPECT_TRUE(status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) << sql << ": " << PQerrorMessage(conn);
  return status == PGRES_TUPLES_OK && PQntuples(result.get()) > 0 ? PQgetvalue(result.get(), 0, 0) : "";
}

TEST(PgOneSession, EveryStatementSetSharesOneSessionWithoutTheirPreparedStatementsColliding) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  dblock::test::Installation installation("postgresql", server_dsn);
  auto one_session = dblock::Store::open(installation.dsn("pool=1"));
  for (int round = 0; round < 2; ++round) {
    dblock::test::run_every_statement_set(one_session, round);
    if (HasFatalFailure()) return;

    // Advisory mode: exclusive and shared, one- and two-part keys, a wait, and its token.
    dblock::LockManager advisory(one_session, {.mode = dblock::LockMode::advisory});
    auto key = dblock::AdvisoryKey::from_name(fmt::format("{}-one-session-{}", installation.prefix(), round));
    auto pair = dblock::AdvisoryKey::of(static_cast<std::int32_t>(key.key()), round);
    for (const auto& target : {key, pair}) {
      auto lock = advisory.try_acquire(target);
      ASSERT_TRUE(lock);
      EXPECT_GT(lock->token(), 0);
      lock->release();
      auto reader = advisory.try_acquire(target, {.shared = true});
      ASSERT_TRUE(reader);
      auto second_reader = advisory.try_acquire(target, {.shared = true});
      ASSERT_TRUE(second_reader) << "a re-entered shared lock";
      second_reader->release();
      reader->release();
      auto waited = advisory.acquire(target, 2s);
      EXPECT_GT(waited.token(), 0);
      waited.release();
    }

    // A transaction-scoped lock on the application's connection, with the same store.
    dblock::test::PgConnection app(PQconnectdb(server_dsn.c_str()));
    ASSERT_EQ(PQstatus(app.get()), CONNECTION_OK) << PQerrorMessage(app.get());
    value(app.get(), "BEGIN");
    auto token = dblock::postgres::try_xact_lock(*one_session, app.get(), key);
    ASSERT_TRUE(token);
    EXPECT_FALSE(advisory.try_acquire(key)) << "held by the application's transaction";
    value(app.get(), "COMMIT");
    auto after = advisory.try_acquire(key);
    ASSERT_TRUE(after) << "released by COMMIT";
    EXPECT_GT(after->token(), *token);
    after->release();
  }
}

}  // namespace
