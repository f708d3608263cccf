// The database crashes (PostgreSQL: pg_ctl stop -m immediate; MariaDB: SIGKILL) and comes back
// while locks are held and a waiter waits. On servers of its own (tools/testdb.sh), so other tests
// are not disturbed.

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <dblock/dblock.hpp>
#include <gtest/gtest.h>

#include "support/own_servers.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

/// Servers of the test's own: `dsn_variable` picks the server whose DSN is used and which crash()
/// and restart() hit.
class OwnCluster {
 public:
  explicit OwnCluster(bool replicated = false, const std::string& dsn_variable = "DBLOCK_TEST_PG_DSN")
      : server_(dsn_variable == "DBLOCK_TEST_MYSQL_DSN" ? "my" : "pg"),
        servers_(replicated ? "start-replicated" : "start"),
        dsn_(servers_.exported(replicated ? "DBLOCK_TEST_PG_FAILOVER_DSN" : dsn_variable)) {}
  [[nodiscard]] const std::string& dsn() const { return dsn_; }
  [[nodiscard]] const std::string& start_log() const { return servers_.log(); }
  void crash() { servers_.run(server_ + "-crash"); }
  void restart() { servers_.run(server_ + "-start"); }
  void promote_replica() { servers_.run("promote"); }

 private:
  std::string server_;
  dblock::test::OwnServers servers_;
  std::string dsn_;
};

class Outage : public ::testing::TestWithParam<dblock::test::BackendCase> {};

TEST_P(Outage, LocksSurviveARestartWithinTheirLeaseAndLapsedOnesAreReportedFirst) {
  std::string shared_server;
  DBLOCK_REQUIRE_DSN(shared_server, GetParam().dsn_env);  // servers can be started on this machine
  OwnCluster cluster(false, GetParam().dsn_env);
  ASSERT_FALSE(cluster.dsn().empty()) << cluster.start_log();
  auto store = dblock::Store::open(cluster.dsn(), {.connect_timeout = 2s});
  dblock::migrate(*store);

  std::promise<std::chrono::steady_clock::time_point> short_lost;
  dblock::LockManager holder(store, {.default_ttl = 30s, .renew_interval = 150ms,
                                     .on_lost = [&](std::string_view name, std::int64_t) {
                                       if (name == "short") short_lost.set_value(std::chrono::steady_clock::now());
                                     }});
  dblock::LockManager other(store);
  auto long_lease = holder.try_acquire("long");
  auto short_lease = holder.try_acquire("short", {.ttl = 800ms});
  ASSERT_TRUE(long_lease && short_lease);
  auto waiter = std::async(std::launch::async, [&] { return other.acquire("long", 6s).token(); });

  cluster.crash();
  auto crashed_at = std::chrono::steady_clock::now();
  auto lost_future = short_lost.get_future();
  ASSERT_EQ(lost_future.wait_for(10s), std::future_status::ready) << "the lapsed lease was not reported";
  auto reported_at = lost_future.get();
  // Reported while the server is still down, i.e. before anyone could be granted it: the local
  // deadline (last renewal's send time + TTL) comes no later than the database's expiry.
  EXPECT_LT(reported_at - crashed_at, 800ms + 300ms);
  EXPECT_TRUE(short_lease->lost());
  EXPECT_FALSE(long_lease->lost()) << "a 30 s lease outlives a short outage";

  cluster.restart();
  auto renewals_at_restart = holder.stats().renewals;
  auto deadline = std::chrono::steady_clock::now() + 15s;
  while (holder.stats().renewals <= renewals_at_restart + 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_GT(holder.stats().renewals, renewals_at_restart + 1) << "renewal did not resume after the restart";
  EXPECT_FALSE(long_lease->lost());
  EXPECT_FALSE(other.try_acquire("long")) << "the surviving lease is still exclusive";
  auto taken_over = other.try_acquire("short");
  ASSERT_TRUE(taken_over) << "the lapsed lease is free after the restart";
  EXPECT_GT(taken_over->token(), short_lease->token());

  try {
    (void)waiter.get();
    ADD_FAILURE() << "the waiter must not get a lock that is still held";
  } catch (const dblock::Timeout& e) {
    SUCCEED() << e.what();  // timed out cleanly, riding out the outage
  }
  EXPECT_THROW(short_lease->release(), dblock::LockLost);
  EXPECT_NO_THROW(long_lease->release());
}

INSTANTIATE_TEST_SUITE_P(Backends, Outage, ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable, dblock::test::kMysqlTable})),
                         [](const auto& info) { return std::string(info.param.label); });

TEST(Failover, ToASynchronousReplicaKeepsGrantedLocksExclusive) {
  std::string shared_server;
  DBLOCK_REQUIRE_DSN(shared_server, "DBLOCK_TEST_PG_DSN");
  OwnCluster cluster(/*replicated=*/true);
  ASSERT_FALSE(cluster.dsn().empty()) << cluster.start_log();
  // Multi-host URI with target_session_attrs=read-write: new sessions find whichever is primary.
  auto store = dblock::Store::open(cluster.dsn(), {.connect_timeout = 2s});
  dblock::migrate(*store);
  dblock::LockManager holder(store, {.default_ttl = 30s, .renew_interval = 200ms});
  dblock::LockManager other(store);
  auto job = holder.try_acquire("job");
  ASSERT_TRUE(job);
  EXPECT_FALSE(other.try_acquire("job"));

  cluster.crash();            // the primary dies
  cluster.promote_replica();  // and the synchronous standby takes over
  auto renewals_at_failover = holder.stats().renewals;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (holder.stats().renewals <= renewals_at_failover + 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_GT(holder.stats().renewals, renewals_at_failover + 1) << "renewal did not follow the new primary";
  EXPECT_FALSE(job->lost()) << "the grant was replicated synchronously, so it survives the failover";
  EXPECT_FALSE(other.try_acquire("job")) << "still exclusive on the new primary";
  auto token = job->token();
  EXPECT_NO_THROW(job->release());
  auto next = other.try_acquire("job");
  ASSERT_TRUE(next);
  EXPECT_GT(next->token(), token) << "tokens keep rising on the promoted replica";
}

}  // namespace
