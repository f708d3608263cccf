// The database crashes (PostgreSQL: pg_ctl stop -m immediate; MariaDB: SIGKILL) and comes back
// while locks are held and a waiter waits. On servers of its own (tools/testdb.sh), so other tests
// are not disturbed.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

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
  // While the server is down a connect is refused at once; a generous timeout only serves a server
  // that is up but slow to accept (2 s ran out under load, beside CPU burners).
  auto store = dblock::Store::open(cluster.dsn(), {.connect_timeout = 15s});
  dblock::migrate(*store);

  std::promise<std::chrono::steady_clock::time_point> short_lost;
  dblock::LockManager holder(
      store, {.default_ttl = 30s, .renew_interval = 150ms, .on_lost = [&](std::string_view name, std::int64_t) {
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

INSTANTIATE_TEST_SUITE_P(Backends, Outage,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable})),
                         [](const auto& info) { return std::string(info.param.label); });

TEST(Failover, ToASynchronousReplicaKeepsGrantedLocksExclusive) {
  std::string shared_server;
  DBLOCK_REQUIRE_DSN(shared_server, "DBLOCK_TEST_PG_DSN");
  OwnCluster cluster(/*replicated=*/true);
  ASSERT_FALSE(cluster.dsn().empty()) << cluster.start_log();
  // Multi-host URI with target_session_attrs=read-write: new sessions find whichever is primary.
  auto store = dblock::Store::open(cluster.dsn(), {.connect_timeout = 15s});  // as in the Outage test
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

// Releases and reaps commit without waiting for the disk on PostgreSQL (doc/semantics.md). A crash
// right after a burst may forget some releases, never a grant: each grant commits durably, and
// that flush carries every release committed before it. So after the restart every acknowledged
// grant still held is there, exclusive, with its token; every released name is free or still its
// releaser's (a forgotten release), never another's; and new tokens exceed every acknowledged one.
TEST(AsyncReleases, ACrashRightAfterABurstForgetsNoGrantRepeatsNoTokenAndGrantsNothingTwice) {
  std::string shared_server;
  DBLOCK_REQUIRE_DSN(shared_server, "DBLOCK_TEST_PG_DSN");
  OwnCluster cluster;
  ASSERT_FALSE(cluster.dsn().empty()) << cluster.start_log();
  auto store = dblock::Store::open(cluster.dsn(), {.connect_timeout = 15s});
  dblock::migrate(*store);
  constexpr int kThreads = 4, kCycles = 150, kNames = 6;
  struct Held {
    std::string name;
    std::string owner;
    std::int64_t token;
  };
  std::vector<std::unique_ptr<dblock::LockManager>> managers;
  for (int t = 0; t < kThreads; ++t)
    managers.push_back(std::make_unique<dblock::LockManager>(store, dblock::ManagerOptions{.default_ttl = 60s}));
  std::vector<std::vector<Held>> still_held(kThreads);
  std::vector<std::vector<Held>> released(kThreads);
  std::vector<std::int64_t> highest(kThreads, 0);
  std::vector<std::optional<dblock::Lock>> kept(kThreads);
  {
    std::vector<std::jthread> workers;
    for (int t = 0; t < kThreads; ++t)
      workers.emplace_back([&, t] {
        // Names shared by all threads: each grant is a hand-off from some other thread's release.
        for (int cycle = 0; cycle < kCycles; ++cycle) {
          auto name = "burst/" + std::to_string((cycle + t) % kNames);
          auto lock = managers[t]->try_acquire(name);
          if (!lock) continue;
          highest[t] = std::max(highest[t], lock->token());
          if (cycle >= kCycles - 2) {  // the last grants stay held through the crash
            still_held[t].push_back({name, managers[t]->owner_id(), lock->token()});
            kept[t] = std::move(lock);
            continue;
          }
          released[t].push_back({name, managers[t]->owner_id(), lock->token()});
          lock->release();
        }
      });
  }
  // A tail of releases with no grant after them: nothing makes these durable before the crash.
  std::vector<dblock::Lock> tail;
  for (int i = 0; i < 30; ++i)
    if (auto lock = managers[0]->try_acquire("tail/" + std::to_string(i))) tail.push_back(std::move(*lock));
  ASSERT_EQ(tail.size(), 30u);
  auto release_tail = [&](std::size_t from, std::size_t to) {
    for (auto i = from; i < to; ++i) {
      released[0].push_back({tail[i].name(), managers[0]->owner_id(), tail[i].token()});
      highest[0] = std::max(highest[0], tail[i].token());
      tail[i].release();
    }
  };
  release_tail(0, 10);
  // Grants right after those releases, hand-offs to another owner, held through the crash; then
  // the rest of the tail released, the last thing before the crash.
  std::vector<dblock::Lock> handed_off;
  for (int i = 0; i < 10; ++i)
    if (auto lock = managers[1]->try_acquire("tail/" + std::to_string(i))) handed_off.push_back(std::move(*lock));
  ASSERT_EQ(handed_off.size(), 10u);
  for (auto& lock : handed_off) {
    still_held[1].push_back({lock.name(), managers[1]->owner_id(), lock.token()});
    highest[1] = std::max(highest[1], lock.token());
  }
  release_tail(10, tail.size());
  cluster.crash();  // right after the last acknowledged release
  cluster.restart();

  auto admin = dblock::Store::open(cluster.dsn(), {.connect_timeout = 10s});
  std::vector<dblock::LockInfo> rows;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {  // the server may still be recovering
    try {
      rows = admin->locks();
      break;
    } catch (const dblock::Error&) {
      std::this_thread::sleep_for(50ms);
    }
  }
  auto row_of = [&](const std::string& name) -> const dblock::LockInfo* {
    for (auto& row : rows)
      if (row.name == name) return &row;
    return nullptr;
  };
  int held_checked = 0, forgotten_releases = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (auto& held : still_held[t]) {
      bool current =
          (kept[t] && held.token == kept[t]->token()) ||
          std::any_of(handed_off.begin(), handed_off.end(), [&](auto& lock) { return lock.token() == held.token; });
      if (!current) continue;  // an earlier kept lock, replaced by the next
      auto row = row_of(held.name);
      ASSERT_NE(row, nullptr) << "an acknowledged grant of '" << held.name << "' was forgotten";
      EXPECT_EQ(row->owner, held.owner);
      EXPECT_EQ(row->token, held.token);
      ++held_checked;
    }
    for (auto& gone : released[t]) {
      auto row = row_of(gone.name);
      if (row != nullptr && row->token == gone.token) {  // a forgotten release: still the releaser's
        EXPECT_EQ(row->owner, gone.owner) << "a token came back under another owner";
        ++forgotten_releases;
      }
    }
  }
  EXPECT_GT(held_checked, 0);
  std::cout << "[ crash    ] " << held_checked << " held grants survived, " << forgotten_releases
            << " releases forgotten by the crash\n";
  // Nothing is granted twice: held names stay exclusive; new tokens exceed every acknowledged one.
  dblock::LockManager after(admin);
  std::int64_t acknowledged = *std::max_element(highest.begin(), highest.end());
  std::vector<std::string> names;
  for (int i = 0; i < kNames; ++i) names.push_back("burst/" + std::to_string(i));
  for (int i = 0; i < 30; ++i) names.push_back("tail/" + std::to_string(i));
  for (auto& name : names) {
    auto row = row_of(name);
    auto lock = after.try_acquire(name);
    if (row != nullptr && row->remaining.count() > 0) {
      EXPECT_FALSE(lock) << name << " is still held by " << row->owner;
    } else if (lock) {
      EXPECT_GT(lock->token(), acknowledged) << "a token was handed out twice";
    }
  }
}

}  // namespace
