// Combined statements (LockBackend::try_acquire_many / release_last_many), on every table-mode
// backend: each request of a batch gets what its own try_acquire / release_last would have given
// it, in its position, and concurrent overlapping batches neither deadlock nor grant a name twice.
// A backend that does not combine (max_batch() == 1) only says so: the core never calls them there.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "core/store_parts.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using dblock::detail::AcquireRequest;
using dblock::detail::Grant;
using dblock::detail::ReleaseRequest;

namespace {

class Combining : public dblock::test::InstalledCaseTest {
 protected:
  dblock::detail::LockBackend& backend() { return dblock::detail::StoreParts::backend(*store_).locks(); }

  /// False (after checking max_batch() == 1) when the backend does not combine: nothing else to test.
  bool combines() {
    if (backend().max_batch() > 1) return true;
    EXPECT_EQ(backend().max_batch(), 1u);
    return false;
  }

  [[nodiscard]] bool is_postgres() const { return std::string(GetParam().dialect) == "postgresql"; }

  /// PostgreSQL: the row's xmin, which changes with every write (and a row lock) of the row.
  std::string xmin(const std::string& name) {
    auto rows = installation_->admin().query(fmt::format("SELECT xmin::text FROM \"{}\".\"{}locks\" WHERE name = '{}'",
                                                         dblock::test::default_schema(GetParam()),
                                                         installation_->prefix(), name));
    return rows.empty() ? "" : rows.front();
  }

  /// PostgreSQL: how many sessions on this test's lock table wait, right now, in a cycle of sessions
  /// that wait for each other (pg_blocking_pids). A cycle lasts until the batch's lock_timeout
  /// (200 ms) breaks it, so sampling sees it; a wait that is merely long (a loaded machine) is none.
  // From one pg_locks snapshot (the view is read under all lock-manager partitions at once, and the
  // CTE reads it once): pg_blocking_pids per session reads at different instants, and a waiter
  // sampled before its blocker moved on and the blocker sampled after made cycles no server had.
  int sessions_in_a_wait_cycle() {
    auto rows = installation_->admin().query(fmt::format(
        "WITH RECURSIVE locks AS MATERIALIZED (SELECT * FROM pg_locks),"
        " ours AS (SELECT pid FROM pg_stat_activity WHERE query LIKE '%{}locks%'),"
        " edges AS ("
        "  SELECT DISTINCT waiter.pid, holder.pid AS blocker FROM locks waiter JOIN locks holder"
        "  ON holder.granted AND holder.pid <> waiter.pid"
        "  AND holder.locktype = waiter.locktype"
        "  AND holder.database IS NOT DISTINCT FROM waiter.database"
        "  AND holder.relation IS NOT DISTINCT FROM waiter.relation"
        "  AND holder.page IS NOT DISTINCT FROM waiter.page"
        "  AND holder.tuple IS NOT DISTINCT FROM waiter.tuple"
        "  AND holder.virtualxid IS NOT DISTINCT FROM waiter.virtualxid"
        "  AND holder.transactionid IS NOT DISTINCT FROM waiter.transactionid"
        "  AND holder.classid IS NOT DISTINCT FROM waiter.classid"
        "  AND holder.objid IS NOT DISTINCT FROM waiter.objid"
        "  AND holder.objsubid IS NOT DISTINCT FROM waiter.objsubid"
        "  WHERE NOT waiter.granted AND waiter.pid IN (SELECT pid FROM ours)),"
        " walk(start, pid, steps) AS ("
        "  SELECT pid, blocker, 1 FROM edges"
        "  UNION ALL SELECT walk.start, edges.blocker, walk.steps + 1 FROM walk JOIN edges ON edges.pid = walk.pid"
        "  WHERE walk.steps < 16 AND walk.pid <> walk.start)"
        " SELECT count(DISTINCT start)::text FROM walk WHERE pid = start",
        installation_->prefix()));
    return rows.empty() ? 0 : std::stoi(rows.front());
  }
};

TEST_P(Combining, EachRequestOfABatchGetsItsOwnOutcomeInItsPosition) {
  if (!combines()) return;
  auto& b = backend();
  const std::string me = "combining-me", other = "combining-other";
  auto refused_row = b.try_acquire("b-refused", other, 60s, 0);
  auto mine = b.try_acquire("c-reentered", me, 60s, 0);
  auto expired_row = b.try_acquire("d-expired", other, 60s, 0);
  auto delayed_row = b.try_acquire("e-delayed", me, 1ms, 0, 60s);  // its lease ends at once, the delay runs
  ASSERT_TRUE(refused_row && mine && expired_row && delayed_row);
  installation_->admin().expire("d-expired");
  ASSERT_TRUE(dblock::test::eventually(
      [&] {
        // Strictly less: `remaining` is whole milliseconds, so equal can still be up to a
        // millisecond before the lease's end, and a batch a round trip later could re-enter it.
        auto row = b.read("e-delayed");
        return row && row->remaining < row->lock_delay;
      },
      5s))
      << "the lease of e-delayed ends, its lock-delay goes on";
  auto refused_version = is_postgres() ? xmin("b-refused") : "";

  std::vector<AcquireRequest> requests{
      {"a-fresh", me, 60s, 0, 0ms},
      {"b-refused", me, 60s, 0, 0ms},
      {"c-reentered", me, 60s, mine->token, 0ms},
      {"d-expired", me, 60s, 0, 0ms},
      {"e-delayed", me, 60s, delayed_row->token, 0ms},  // the holder itself, past its lease: refused
  };
  auto outcomes = b.try_acquire_many(requests);
  ASSERT_EQ(outcomes.size(), requests.size());

  ASSERT_TRUE(outcomes[0]) << "a fresh name is granted";
  EXPECT_EQ(outcomes[0]->count, 1);
  // Galera draws each name's tokens from a counter of its own: they rise per name only.
  if (std::string(GetParam().label) != "galera_table") {
    EXPECT_GT(outcomes[0]->token, delayed_row->token) << "a new token, above every earlier one";
  }
  EXPECT_FALSE(outcomes[1]) << "another owner's live row is refused";
  ASSERT_TRUE(outcomes[2]) << "the holder re-enters with the token it holds";
  EXPECT_EQ(outcomes[2]->count, 2);
  EXPECT_EQ(outcomes[2]->token, mine->token);
  ASSERT_TRUE(outcomes[3]) << "another owner's row whose lease ended is taken over";
  EXPECT_EQ(outcomes[3]->count, 1);
  EXPECT_GT(outcomes[3]->token, expired_row->token);
  EXPECT_FALSE(outcomes[4]) << "a lease that ended within its lock-delay is not re-entered";

  auto fresh = b.read("a-fresh");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->owner, me);
  EXPECT_EQ(fresh->token, outcomes[0]->token);
  auto refused = b.read("b-refused");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->owner, other) << "a refused row is unchanged";
  EXPECT_EQ(refused->count, 1);
  EXPECT_EQ(refused->token, refused_row->token);
  EXPECT_GT(refused->remaining, 50s);
  if (is_postgres()) {
    EXPECT_EQ(xmin("b-refused"), refused_version) << "a refused row is not even written";
  }
  auto reentered = b.read("c-reentered");
  ASSERT_TRUE(reentered);
  EXPECT_EQ(reentered->owner, me);
  EXPECT_EQ(reentered->count, 2);
  EXPECT_EQ(reentered->token, mine->token);
  auto taken = b.read("d-expired");
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->owner, me);
  EXPECT_EQ(taken->count, 1);
  EXPECT_EQ(taken->token, outcomes[3]->token);
  EXPECT_GT(taken->remaining, 50s);
  auto delayed = b.read("e-delayed");
  ASSERT_TRUE(delayed);
  EXPECT_EQ(delayed->owner, me) << "a refused row is unchanged";
  EXPECT_EQ(delayed->token, delayed_row->token);
  EXPECT_EQ(delayed->count, 1);
  EXPECT_EQ(delayed->lock_delay, 60s);
  EXPECT_LE(delayed->remaining, 60s) << "its lease was not renewed";

  // The same requests alone, on the rows as the batch left them: the same answers.
  EXPECT_FALSE(b.try_acquire("b-refused", me, 60s, 0));
  EXPECT_FALSE(b.try_acquire("e-delayed", me, 60s, delayed_row->token));
}

// Takeovers of rows whose lease ended, alternating between single statements and batches and
// between owners: every grant of a name gets a larger token than the one before.
TEST_P(Combining, TokensRisePerNameAcrossBatchesAndSingleStatements) {
  if (!combines()) return;
  auto& b = backend();
  const std::vector<std::string> names{"tok-a", "tok-b", "tok-c"};
  std::map<std::string, std::int64_t> last;
  for (int round = 0; round < 6; ++round) {
    std::string owner = fmt::format("owner-{}", round % 2);
    std::vector<std::optional<Grant>> grants;
    if (round % 3 == 1) {
      for (auto& name : names) grants.push_back(b.try_acquire(name, owner, 60s, 0));
    } else {
      std::vector<AcquireRequest> requests;
      for (auto& name : names) requests.push_back({name, owner, 60s, 0, 0ms});
      grants = b.try_acquire_many(requests);
    }
    ASSERT_EQ(grants.size(), names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      ASSERT_TRUE(grants[i]) << "round " << round << ", " << names[i] << ": its row's lease had ended";
      EXPECT_EQ(grants[i]->count, 1) << "a takeover, not a re-entry";
      EXPECT_GT(grants[i]->token, last[names[i]]) << "round " << round << ", " << names[i];
      last[names[i]] = grants[i]->token;
      auto row = b.read(names[i]);
      ASSERT_TRUE(row);
      EXPECT_EQ(row->owner, owner);
      EXPECT_EQ(row->token, grants[i]->token);
      installation_->admin().expire(names[i]);
    }
  }
}

TEST_P(Combining, ReleaseLastManyDeletesOnlyTheRowsOfThatOwnerAndToken) {
  if (!combines()) return;
  auto& b = backend();
  const std::string me = "combining-me";
  auto a = b.try_acquire("a-mine", me, 60s, 0);
  auto wrong = b.try_acquire("b-wrong-token", me, 60s, 0);
  auto stolen = b.try_acquire("c-taken-over", me, 60s, 0);
  auto revoked = b.try_acquire("c-revoked", me, 60s, 0);
  auto deep = b.try_acquire("e-reentered", me, 60s, 0);
  ASSERT_TRUE(a && wrong && stolen && revoked && deep);
  ASSERT_TRUE(b.revoke("c-revoked"));                               // the same token under another owner
  ASSERT_TRUE(b.try_acquire("e-reentered", me, 60s, deep->token));  // count 2: deleted whatever its count
  installation_->admin().steal("c-taken-over", "thief");
  auto thief = b.read("c-taken-over");
  ASSERT_TRUE(thief);

  auto notifications = dblock::detail::StoreParts::backend(*store_).notifications();
  auto listener =
      notifications ? notifications->listen() : nullptr;  // where the database notifies waiters (PostgreSQL)
  if (listener) listener->watch("a-mine");

  std::vector<ReleaseRequest> requests{
      {"a-mine", me, a->token},
      {"b-wrong-token", me, wrong->token + 1000},
      {"c-revoked", me, revoked->token},
      {"c-taken-over", me, stolen->token},
      {"d-no-row", me, 42},
      {"e-reentered", me, deep->token},
  };
  auto released = b.release_last_many(requests);
  EXPECT_EQ(released, (std::vector<bool>{true, false, false, false, false, true}));
  EXPECT_FALSE(b.read("a-mine"));
  auto kept = b.read("b-wrong-token");
  ASSERT_TRUE(kept) << "another token's row stays";
  EXPECT_EQ(kept->token, wrong->token);
  auto taken = b.read("c-taken-over");
  ASSERT_TRUE(taken) << "a row taken over by another owner stays";
  EXPECT_EQ(taken->owner, "thief");
  EXPECT_EQ(taken->token, thief->token);
  auto still_revoked = b.read("c-revoked");
  ASSERT_TRUE(still_revoked) << "a revoked row is deleted by its acknowledgement, not by a release";
  EXPECT_EQ(still_revoked->token, revoked->token);
  EXPECT_NE(still_revoked->owner, me);
  EXPECT_FALSE(b.read("d-no-row"));
  EXPECT_FALSE(b.read("e-reentered"));
  if (listener) {
    std::vector<std::string> heard;
    EXPECT_TRUE(dblock::test::eventually(
        [&] {
          for (auto& notice : listener->wait(100ms)) heard.push_back(notice.name);
          return std::ranges::find(heard, "a-mine") != heard.end();
        },
        5s))
        << "a waiter on a released name is woken";
  }
  EXPECT_EQ(b.release_last_many(requests), std::vector<bool>(requests.size(), false)) << "nothing left to release";
}

// Threads of different owners send batches of overlapping names (sorted, as the core sends them),
// a few also single statements, then release what they got. No deadlock, no name held by two
// owners at once, and each grant is the row the database holds.
TEST_P(Combining, OverlappingBatchesNeverDeadlockNorGrantANameTwice) {
  if (!combines()) return;
  auto& b = backend();
  constexpr int kThreads = 8;
  constexpr int kNames = 12;
  std::vector<std::string> names;
  for (int i = 0; i < kNames; ++i) names.push_back(fmt::format("hot-{:02}", i));
  std::mutex mutex;
  std::map<std::string, std::string> holder;  // name -> owner, between grant and release
  std::map<std::string, std::int64_t> last_token;
  std::atomic<int> batches{0}, granted{0}, transient{0}, deadlocks{0}, lock_timeouts{0};
  auto count = [&](const dblock::detail::TransientError& e) {
    ++transient;
    std::string state = e.sqlstate();
    if (state == "40P01" || std::string(e.what()).find("eadlock") != std::string::npos) ++deadlocks;
    if (state == "55P03") ++lock_timeouts;
  };
  std::vector<std::string> failures;
  auto fail = [&](std::string what) {
    std::lock_guard lock(mutex);
    if (failures.size() < 20) failures.push_back(std::move(what));
  };
  auto deadline = std::chrono::steady_clock::now() + 600ms;
  // PostgreSQL: a cycle would end in 55P03 (the batch's lock_timeout, 200 ms, fires before
  // deadlock_timeout, 1 s), and so would a wait that a loaded machine made long. The cycles are
  // counted where they happen, by sampling the sessions' waits while the workers run.
  std::atomic<bool> workers_done{false};
  std::atomic<int> largest_cycle{0};
  std::thread cycle_watch;
  if (is_postgres()) {
    cycle_watch = std::thread([&] {
      while (!workers_done) {
        largest_cycle = std::max(largest_cycle.load(), sessions_in_a_wait_cycle());
        std::this_thread::sleep_for(5ms);  // a sampling cadence: a cycle lasts 200 ms
      }
    });
  }
  auto worker = [&](int id) {
    std::mt19937 random(static_cast<unsigned>(id) * 7919u + 1u);
    std::string owner = fmt::format("worker-{}", id);
    bool singles = id >= kThreads - 2;  // the single statements take part in the same lock order
    while (std::chrono::steady_clock::now() < deadline) {
      std::vector<std::string> picked = names;
      std::shuffle(picked.begin(), picked.end(), random);
      picked.resize(3 + random() % 4);
      std::ranges::sort(picked);
      std::vector<std::optional<Grant>> grants;
      try {
        if (singles) {
          for (auto& name : picked) grants.push_back(b.try_acquire(name, owner, 60s, 0));
        } else {
          std::vector<AcquireRequest> requests;
          for (auto& name : picked) requests.push_back({name, owner, 60s, 0, 0ms});
          grants = b.try_acquire_many(requests);
          ++batches;
        }
      } catch (const dblock::detail::TransientError& e) {
        count(e);
        continue;  // nothing took effect
      }
      if (grants.size() != picked.size()) {
        fail("a batch answered with another number of outcomes");
        return;
      }
      std::vector<ReleaseRequest> held;
      for (std::size_t i = 0; i < picked.size(); ++i) {
        if (!grants[i]) continue;
        ++granted;
        {
          std::lock_guard lock(mutex);
          auto [at, fresh] = holder.emplace(picked[i], owner);
          if (!fresh)
            failures.push_back(fmt::format("{} granted to {} while {} held it", picked[i], owner, at->second));
          if (grants[i]->token <= last_token[picked[i]])
            failures.push_back(
                fmt::format("{}: token {} after {}", picked[i], grants[i]->token, last_token[picked[i]]));
          last_token[picked[i]] = grants[i]->token;
        }
        auto row = b.read(picked[i]);
        if (!row || row->owner != owner || row->token != grants[i]->token || row->count != 1)
          fail(fmt::format("{}: the row is not the grant of {}", picked[i], owner));
        held.push_back({*std::ranges::find(names, picked[i]), owner, grants[i]->token});  // `names` outlives `picked`
      }
      {
        std::lock_guard lock(mutex);
        for (auto& request : held) holder.erase(std::string(request.name));
      }
      // Released even after a transient failure: the lease is a minute, and the others want the names.
      for (int attempt = 0; !held.empty(); ++attempt) {
        try {
          std::vector<bool> released;
          if (singles) {
            for (auto& request : held)
              released.push_back(b.release_last(request.name, owner, request.token).has_value());
          } else {
            released = b.release_last_many(held);
          }
          if (std::ranges::count(released, true) != static_cast<std::ptrdiff_t>(held.size()))
            fail(fmt::format("{} released only some of its rows", owner));
          break;
        } catch (const dblock::detail::TransientError& e) {
          count(e);
          if (attempt == 5) {
            fail(fmt::format("{} could not release: {}", owner, e.what()));
            break;
          }
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) threads.emplace_back(worker, id);
  for (auto& thread : threads) thread.join();
  workers_done = true;
  if (cycle_watch.joinable()) cycle_watch.join();

  for (auto& failure : failures) ADD_FAILURE() << failure;
  EXPECT_GT(batches.load(), 0);
  EXPECT_GT(granted.load(), 0);
  std::cout << fmt::format(
      "[ combining ] {} batches, {} grants, {} transient failures ({} deadlocks, {} lock timeouts)\n", batches.load(),
      granted.load(), transient.load(), deadlocks.load(), lock_timeouts.load());
  if (is_postgres()) {
    // Locking rows in descending order makes several cycles per run here.
    EXPECT_EQ(deadlocks.load(), 0) << "PostgreSQL batches lock in one order";
    EXPECT_EQ(largest_cycle.load(), 0) << "sessions waited for each other: PostgreSQL batches lock in one order";
  }
  // A lock timeout that was no cycle is a wait a loaded machine made long: not this code's rarity.
  EXPECT_LE(transient.load() - lock_timeouts.load(), std::max(2, batches.load() / 20))
      << "transient failures must stay rare";
}

INSTANTIATE_TEST_SUITE_P(Backends, Combining,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kSqlite,
                              dblock::test::kSqliteQueued, dblock::test::kPgBouncerTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
