// Through a real PgBouncer in transaction mode (tools/testdb.sh starts one with
// default_pool_size = 16): table mode works with or without pool_mode=transaction in the URI,
// migrations leave no session lock on a server connection, and advisory mode is refused on every
// path. The conformance and stress suites run through the same pooler as `pgbouncer_table`.

#include <libpq-fe.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/postgres/pg_advisory.hpp"
#include "support/installation.hpp"
#include "support/pg_connection.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

/// The server connections PgBouncer keeps for the test database (tools/testdb.sh).
constexpr int kPoolerServerConnections = 16;

void run_sql(PGconn* conn, const std::string& sql) {
  PGresult* result = PQexec(conn, sql.c_str());
  auto status = PQresultStatus(result);
  std::string error = PQresultErrorMessage(result);
  PQclear(result);
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) throw std::runtime_error(sql + ": " + error);
}

/// Sends `sql` and reads every result, unless the server (here: the pooler) has not answered by
/// `patience`: then false, and the connection is left busy, fit only to be closed.
bool run_sql_within(PGconn* conn, const std::string& sql, std::chrono::milliseconds patience) {
  if (PQsendQuery(conn, sql.c_str()) == 0) throw std::runtime_error(sql + ": " + PQerrorMessage(conn));
  auto until = std::chrono::steady_clock::now() + patience;
  while (PQisBusy(conn) != 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left <= 0ms) return false;
    pollfd readable{.fd = PQsocket(conn), .events = POLLIN, .revents = 0};
    if (poll(&readable, 1, static_cast<int>(left.count())) < 0 || PQconsumeInput(conn) == 0)
      throw std::runtime_error(sql + ": " + PQerrorMessage(conn));
  }
  while (PGresult* result = PQgetResult(conn)) {
    auto status = PQresultStatus(result);
    std::string error = PQresultErrorMessage(result);
    PQclear(result);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) throw std::runtime_error(sql + ": " + error);
  }
  return true;
}

/// Every server connection of the pooler, each held by a client of ours in an open transaction.
/// Other tests share the pooler, and one that holds a server connection in a transaction while it
/// waits for a second (a migrator does) would wait on us as we wait on it, until both time out: so
/// a pin the pooler does not serve within a few seconds gives every pin back, and all are tried again.
std::vector<dblock::test::PgConnection> pin_every_server_connection(const std::string& pooler_dsn) {
  auto until = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < until) {
    std::vector<dblock::test::PgConnection> pinned;
    bool served = true;
    for (int i = 0; i < kPoolerServerConnections && served; ++i) {
      pinned.emplace_back(PQconnectdb(pooler_dsn.c_str()));
      if (PQstatus(pinned.back().get()) != CONNECTION_OK) throw std::runtime_error(PQerrorMessage(pinned.back().get()));
      // The pooler hands this client a server connection at its first statement, for the transaction.
      served = run_sql_within(pinned.back().get(), "BEGIN; SELECT 1", 3s);
    }
    if (served) return pinned;
  }
  throw std::runtime_error("the pooler's server connections could not all be pinned at once within 90 s");
}

class Pooler : public ::testing::Test {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_DSN(pooler_dsn_, "DBLOCK_TEST_PGBOUNCER_DSN");
    DBLOCK_REQUIRE_DSN(direct_dsn_, "DBLOCK_TEST_PG_DSN");
    installation_ = std::make_unique<dblock::test::Installation>(
        "postgresql", direct_dsn_, dblock::test::InstallationSetup{.migrated = false, .keep_store = false});
    prefix_ = installation_->prefix();
  }

  std::string pooler_dsn_;
  std::string direct_dsn_;
  std::unique_ptr<dblock::test::Installation> installation_;
  std::string prefix_;
};

TEST_F(Pooler, TableModeWithoutTheParameterDetectsThePoolerAndKeepsExclusion) {
  dblock::migrate(*installation_->open_store());
  // Two stores, as two processes would be, each statement free to land on any server connection.
  std::vector<std::shared_ptr<dblock::Store>> stores;
  for (int i = 0; i < 2; ++i) stores.push_back(dblock::Store::open(installation_->dsn_on(pooler_dsn_, "pool=4")));
  std::int64_t counter = 0;
  std::int64_t last_token = 0;
  std::atomic<int> failures{0}, violations{0};
  constexpr int kThreads = 4, kIterations = 60;
  {
    std::vector<std::unique_ptr<dblock::LockManager>> managers;
    for (auto& store : stores) managers.push_back(std::make_unique<dblock::LockManager>(store));
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kIterations; ++i) {
          try {
            auto lock = managers[static_cast<std::size_t>(t % 2)]->acquire("hop", 30s);
            if (lock.token() <= last_token) ++violations;
            last_token = lock.token();
            auto value = counter;
            std::this_thread::yield();
            counter = value + 1;
          } catch (const std::exception& e) {
            if (++failures < 3) ADD_FAILURE() << e.what();
          }
        }
      });
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(violations, 0);
  EXPECT_EQ(counter, kThreads * kIterations);
  EXPECT_TRUE(stores[0]->locks().empty());
}

TEST_F(Pooler, MigrationsLeaveNoSessionLockBehind) {
  auto pooled = dblock::Store::open(installation_->dsn_on(pooler_dsn_, "pool_mode=transaction"));
  auto result = dblock::Migrator(pooled, 10s).up();
  EXPECT_EQ(result.current_version, dblock::latest_schema_version());
  EXPECT_EQ(static_cast<int>(result.applied.size()), dblock::latest_schema_version());
  // A session lock taken through the pooler would stay on a server connection the pooler keeps:
  // a direct migrator could then never take the lock.
  auto direct = installation_->open_store();
  EXPECT_NO_THROW((void)dblock::Migrator(direct, 2s).repair());
  for (auto& status : dblock::Migrator(direct, 2s).status()) EXPECT_EQ(status.state, dblock::MigrationState::applied);
}

TEST_F(Pooler, AdvisoryModeIsRefusedUpFrontWithTheParameter) {
  auto store = dblock::Store::open(installation_->dsn_on(pooler_dsn_, "pool_mode=transaction"));
  try {
    dblock::LockManager refused(store, {.mode = dblock::LockMode::advisory});
    FAIL() << "advisory mode behind a transaction pooler must be refused";
  } catch (const dblock::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("pool_mode=transaction"), std::string::npos) << e.what();
  }
}

TEST_F(Pooler, AdvisoryModeIsRefusedAtTheFirstStatementWithoutTheParameter) {
  dblock::migrate(*installation_->open_store());
  // Another client of the pooler has left our first statement prepared on every server connection
  // (as an earlier dblock process does): pin them all in open transactions, prepare it on each.
  dblock::detail::StatementIds ids;
  dblock::detail::PgAdvisorySql sql(ids, "public", prefix_);
  auto key = dblock::AdvisoryKey::from_name("first-statement");
  const auto& first = sql.try_lock(dblock::detail::AdvisoryTarget{key, "first-statement"}, false);
  for (auto& conn : pin_every_server_connection(pooler_dsn_)) {
    PGresult* result = PQexec(conn.get(), ("PREPARE \"" + first.name + "\" AS " + first.sql).c_str());
    auto status = PQresultStatus(result);
    std::string error = PQresultErrorMessage(result);
    PQclear(result);
    // Already there from an earlier run on this server connection is as good.
    ASSERT_TRUE(status == PGRES_COMMAND_OK || error.find("already exists") != std::string::npos) << error;
    run_sql(conn.get(), "COMMIT");
  }
  auto store = dblock::Store::open(installation_->dsn_on(pooler_dsn_, "pool=1"));
  dblock::LockManager locks(store, {.mode = dblock::LockMode::advisory});
  try {
    auto held = locks.try_acquire("first-statement");
    FAIL() << "the first advisory statement through a transaction pooler must be refused";
  } catch (const dblock::ConnectionError& e) {
    EXPECT_NE(std::string(e.what()).find("pool_mode=transaction"), std::string::npos) << e.what();
  }
  // Nothing was locked: the statement never ran.
  dblock::test::PgConnection direct(PQconnectdb(direct_dsn_.c_str()));
  auto k = static_cast<std::uint64_t>(key.key());
  PGresult* held =
      PQexec(direct.get(),
             ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = " + std::to_string(k >> 32) +
              " AND objid = " + std::to_string(k & 0xffffffffu) + " AND objsubid = 1")
                 .c_str());
  ASSERT_EQ(PQresultStatus(held), PGRES_TUPLES_OK);
  EXPECT_STREQ(PQgetvalue(held, 0, 0), "0");
  PQclear(held);
}

TEST_F(Pooler, AdvisoryModeIsRefusedEveryTimeWithoutTheParameter) {
  // Detected at the first lock statement of every fresh store, whichever server connection the
  // pooler runs it on: its login reported a pid of PgBouncer's own, and the statement takes the
  // lock only on that pid. Before, the check compared two statements' server processes and passed
  // when the pooler happened to run both on one: a lock was then granted through the pooler, and
  // an acquire with a timeout retried the refusal as a connection error until its deadline.
  dblock::migrate(*installation_->open_store());
  auto key = dblock::AdvisoryKey::of(static_cast<std::int64_t>(getpid()) * 1000 + 50);
  constexpr int kStores = 50;
  auto started = std::chrono::steady_clock::now();
  int refused = 0, attempts = 0;
  for (int i = 0; i < kStores && std::chrono::steady_clock::now() - started < 40s; ++i) {
    ++attempts;
    auto store = dblock::Store::open(installation_->dsn_on(pooler_dsn_, "pool=2"));
    dblock::LockManager locks(store, {.mode = dblock::LockMode::advisory});
    auto attempt_started = std::chrono::steady_clock::now();
    try {
      if (i % 2 == 0)
        (void)locks.try_acquire(key);
      else
        (void)locks.acquire(key, 20s);
      ADD_FAILURE() << "store " << i << ": granted through a transaction pooler";
    } catch (const dblock::Error& e) {
      bool named = std::string(e.what()).find("pool_mode") != std::string::npos;
      EXPECT_TRUE(named && (e.category() == dblock::ErrorCategory::connection ||
                            e.category() == dblock::ErrorCategory::invalid_argument))
          << "store " << i << ": " << e.what();
      EXPECT_LT(std::chrono::steady_clock::now() - attempt_started, 5s) << "store " << i << ": refused, not waited out";
      if (named) ++refused;
    }
  }
  EXPECT_EQ(refused, attempts) << "every store's first statement is refused";
  EXPECT_GE(attempts, 10) << "the 40 s bound on the run (for a loaded machine) left too few stores to mean anything";
  // Nothing was taken on any server connection of the pooler.
  dblock::test::PgConnection direct(PQconnectdb(direct_dsn_.c_str()));
  auto k = static_cast<std::uint64_t>(key.key());
  PGresult* held =
      PQexec(direct.get(),
             ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = " + std::to_string(k >> 32) +
              " AND objid = " + std::to_string(k & 0xffffffffu) + " AND objsubid = 1")
                 .c_str());
  ASSERT_EQ(PQresultStatus(held), PGRES_TUPLES_OK);
  EXPECT_STREQ(PQgetvalue(held, 0, 0), "0");
  PQclear(held);
}

}  // namespace
