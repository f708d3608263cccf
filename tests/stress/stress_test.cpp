// Concurrency stress against a real server: many threads in several managers on a few hot names,
// short random holds, releases deleting rows, while an "abandoner" takes the same names with 5 ms
// leases it never releases and a reaper deletes what lapses — so grants go through every path:
// fresh insert, insert after the reaper deleted the row, takeover of an expired row. Mutual
// exclusion is checked with a plain (non-atomic) counter per name, and fencing tokens must rise
// strictly in grant order (doc/database-facts.md §1 shows a naive upsert failing this). Bounded.

#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "core/store_parts.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

class Stress : public ::testing::TestWithParam<dblock::test::BackendCase> {
 protected:
  static void TearDownTestSuite() { dblock::test::remove_embedded_sqlite(); }

  /// A migrated installation of the test's own, a store on each node of a cluster (one store
  /// elsewhere): managers on different stores contend across nodes.
  std::vector<std::shared_ptr<dblock::Store>> stores_per_node(const std::string& dsn) {
    return dblock::test::Installation(GetParam(), dblock::test::node_dsns(GetParam(), dsn), {.store_params = "pool=16"})
        .stores_on_nodes();
  }
};

TEST_P(Stress, HotNamesKeepExclusionAndTokenOrder) {
  std::string dsn;
  DBLOCK_REQUIRE_BACKEND_DSN(dsn, GetParam());
  auto stores = stores_per_node(dsn);
  auto& store = stores.front();

  constexpr int kManagers = 3;
  constexpr int kThreadsPerManager = 4;
  constexpr int kIterations = 150;
  const std::vector<std::string> names{"hot/a", "hot/b", "hot/c"};
  struct Guarded {
    std::int64_t counter = 0;  // incremented without synchronisation: only the lock protects it
    std::int64_t last_token = 0;
    std::int64_t inside = 0;
    std::int64_t violations = 0;
  };
  std::map<std::string, Guarded> state;
  for (auto& name : names) state[name];

  std::vector<std::unique_ptr<dblock::LockManager>> managers;
  for (int m = 0; m < kManagers; ++m)
    // Every other manager writes its releases behind (ManagerOptions::write_behind_releases).
    managers.push_back(std::make_unique<dblock::LockManager>(
        stores[static_cast<std::size_t>(m) % stores.size()],
        dblock::ManagerOptions{.default_ttl = 10s, .write_behind_releases = m % 2 == 1}));

  auto deadline = std::chrono::steady_clock::now() + 120s;
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  std::atomic<int> abandoned{0};
  auto& backend = dblock::detail::StoreParts::backend(*store).locks();
  std::jthread abandoner([&] {
    std::mt19937 random(99);
    while (!done) {
      try {
        if (backend.try_acquire(names[random() % names.size()], "abandoner", 5ms, 0)) ++abandoned;
      } catch (const dblock::detail::TransientError&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(random() % 5));
    }
  });
  dblock::Reaper reaper(store, {.interval = 2ms, .batch_size = 10});
  reaper.start();
  std::vector<std::jthread> threads;
  for (int t = 0; t < kManagers * kThreadsPerManager; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t));
      auto& manager = *managers[static_cast<std::size_t>(t % kManagers)];
      for (int i = 0; i < kIterations && std::chrono::steady_clock::now() < deadline; ++i) {
        auto& name = names[random() % names.size()];
        try {
          auto lock = manager.acquire(name, 30s);
          auto& guarded = state[name];
          if (++guarded.inside != 1) ++guarded.violations;
          if (lock.token() <= guarded.last_token) ++guarded.violations;
          guarded.last_token = lock.token();
          auto value = guarded.counter;
          std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));
          guarded.counter = value + 1;
          --guarded.inside;
          lock.release();
        } catch (const std::exception& e) {
          ++failures;
          ADD_FAILURE() << "thread " << t << ": " << e.what();
        }
      }
    });
  }
  threads.clear();
  done = true;
  abandoner.join();
  reaper.stop();
  ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "stress did not finish in time";
  EXPECT_GT(abandoned, 0) << "the abandoner must have taken some leases";
  EXPECT_GT(reaper.stats().rows, 0u) << "the reaper must have deleted lapsed leases";
  EXPECT_EQ(failures, 0);
  std::int64_t total = 0;
  for (auto& [name, guarded] : state) {
    EXPECT_EQ(guarded.violations, 0) << name;
    total += guarded.counter;
  }
  EXPECT_EQ(total, kManagers * kThreadsPerManager * kIterations);
  std::uint64_t combined = 0, written_behind = 0;
  for (auto& manager : managers) {
    combined += manager->stats().combined;
    written_behind += manager->stats().written_behind;
  }
  if (backend.max_batch() > 1) {
    EXPECT_GT(combined, 0U)
        << "the threads of a manager must have shared statements: the rules held inside batches too";
  }
  // A release is written behind only while another release of its manager is in flight: the
  // threads above overlap so by chance, which a busy machine (or a fast one) can deny them. Until
  // one was, three threads of a writing-behind manager take the three names and let go at once.
  auto& behind = *managers[1];
  for (int round = 0; written_behind == 0 && round < 200; ++round) {
    std::barrier all_hold(static_cast<std::ptrdiff_t>(names.size()));
    std::vector<std::jthread> releasers;
    for (auto& name : names)
      releasers.emplace_back([&, name] {
        std::optional<dblock::Lock> lock;
        try {
          lock.emplace(behind.acquire(name, 30s));
          auto& guarded = state[name];
          if (lock->token() <= guarded.last_token) ++guarded.violations;
          guarded.last_token = lock->token();
        } catch (const std::exception& e) {
          ADD_FAILURE() << name << ": " << e.what();
        }
        all_hold.arrive_and_wait();
        try {
          if (lock) lock->release();
        } catch (const std::exception& e) {
          ADD_FAILURE() << name << ": " << e.what();
        }
      });
    releasers.clear();
    written_behind = behind.stats().written_behind;
  }
  EXPECT_GT(written_behind, 0U) << "releases must have been written behind: the rules held for them too";
  // The names a release written behind let go of are free for the others, with a later token.
  for (auto& name : names) {
    auto lock = managers[0]->acquire(name, 30s);
    EXPECT_GT(lock.token(), state[name].last_token) << name;
    EXPECT_EQ(state[name].violations, 0) << name;
  }
  managers.clear();  // a manager's end sends the releases still written behind
  for (auto& row : store->locks())
    EXPECT_EQ(row.owner, "abandoner") << "every release deleted its row; only abandoned leases may remain";
}

/// Groups under the same pressure: managers (on different nodes of a cluster) take permits of a
/// semaphore of three and read and write one read-write lock, while an abandoner takes permits
/// with 5 ms leases it never gives back and a reaper deletes what lapses. At no instant do more
/// than three of ours hold permits (abandoned ones count against the three as well), and no writer
/// works beside a reader or another writer; the writers' unsynchronised counter comes out exact,
/// and their tokens rise.
class GroupStress : public Stress {};

TEST_P(GroupStress, GroupsKeepTheirCapacityAndWritersWorkAlone) {
  std::string dsn;
  DBLOCK_REQUIRE_BACKEND_DSN(dsn, GetParam());
  auto stores = stores_per_node(dsn);
  auto& store = stores.front();
  constexpr int kManagers = 3, kThreadsPerManager = 3, kIterations = 60;
  constexpr std::int64_t kPermits = 3;
  std::vector<std::unique_ptr<dblock::LockManager>> managers;
  for (int m = 0; m < kManagers; ++m)
    // Every other manager writes its releases behind (ManagerOptions::write_behind_releases).
    managers.push_back(std::make_unique<dblock::LockManager>(
        stores[static_cast<std::size_t>(m) % stores.size()],
        dblock::ManagerOptions{.default_ttl = 10s, .write_behind_releases = m % 2 == 1}));
  std::atomic<int> permit_holders{0}, most_permit_holders{0}, readers{0}, writers{0}, violations{0}, failures{0};
  std::atomic<bool> done{false};
  std::int64_t written = 0, last_writer_token = 0;  // only the write lock protects them
  std::atomic<int> writes{0}, abandoned{0};
  auto& backend = dblock::detail::StoreParts::backend(*store).groups().get();
  std::jthread abandoner([&] {
    std::mt19937 random(7);
    while (!done) {
      try {
        if (backend.try_acquire_member("sem", "abandoner", dblock::HolderKind::permit, kPermits, 5ms, 0)) ++abandoned;
      } catch (const dblock::detail::TransientError&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(random() % 10));
    }
  });
  dblock::Reaper reaper(store, {.interval = 2ms, .batch_size = 10});
  reaper.start();
  auto deadline = std::chrono::steady_clock::now() + 120s;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kManagers * kThreadsPerManager; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 random(static_cast<unsigned>(100 + t));
        auto& manager = *managers[static_cast<std::size_t>(t % kManagers)];
        for (int i = 0; i < kIterations && std::chrono::steady_clock::now() < deadline; ++i) {
          try {
            switch (random() % 3) {
              case 0: {
                auto permit = manager.acquire("sem", 30s, {.permits = kPermits});
                int now = ++permit_holders;
                int seen = most_permit_holders.load();
                while (now > seen && !most_permit_holders.compare_exchange_weak(seen, now)) {
                }
                std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));
                --permit_holders;
                permit.release();
                break;
              }
              case 1: {
                auto read = manager.acquire("rw", 30s, {.shared = true});
                ++readers;
                if (writers.load() != 0) ++violations;
                std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));
                --readers;
                read.release();
                break;
              }
              default: {
                auto write = manager.acquire("rw", 30s);
                if (++writers != 1 || readers.load() != 0) ++violations;
                if (write.token() <= last_writer_token) ++violations;
                last_writer_token = write.token();
                auto value = written;
                std::this_thread::sleep_for(std::chrono::microseconds(random() % 1000));
                written = value + 1;
                ++writes;
                --writers;
                write.release();
              }
            }
          } catch (const std::exception& e) {
            ++failures;
            ADD_FAILURE() << "thread " << t << ": " << e.what();
          }
        }
      });
    }
  }
  done = true;
  abandoner.join();
  reaper.stop();
  ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "stress did not finish in time";
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(violations, 0) << "a writer beside another holder, or a writer's token out of order";
  EXPECT_LE(most_permit_holders.load(), kPermits);
  EXPECT_GT(abandoned, 0) << "the abandoner must have taken some permits";
  EXPECT_EQ(written, writes.load()) << "the write lock must protect the writers' counter";
  std::cout << GetParam().label << ": most permit holders " << most_permit_holders << ", writes " << writes
            << ", reaped " << reaper.stats().rows << "\n";
}

/// The same contract in every mode, advisory included: 8 threads on 2 hot names, through acquire
/// with waiting, for a bounded run. The counter must come out exact and no error (a deadlock the
/// database reports included) may reach the caller.
class ModeStress : public Stress {};

TEST_P(ModeStress, EightThreadsOnTwoHotNamesCountExactly) {
  std::string dsn;
  DBLOCK_REQUIRE_BACKEND_DSN(dsn, GetParam());
  auto store = dblock::test::Installation(GetParam(), dsn, {.store_params = "pool=12"}).store();
  constexpr int kThreads = 8;
  constexpr int kIterations = 200;
  const std::array<std::string, 2> names{"hot/1", "hot/2"};
  std::array<std::int64_t, 2> counters{};
  std::array<std::int64_t, 2> last_token{};
  std::atomic<int> violations{0}, failures{0};
  dblock::LockManager manager(store, {.mode = GetParam().mode, .default_ttl = 10s});
  auto deadline = std::chrono::steady_clock::now() + 120s;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kIterations && std::chrono::steady_clock::now() < deadline; ++i) {
          auto which = static_cast<std::size_t>((t + i) % 2);
          try {
            auto lock = manager.acquire(names[which], 30s);
            if (lock.token() <= last_token[which]) ++violations;
            last_token[which] = lock.token();
            auto value = counters[which];
            std::this_thread::yield();
            counters[which] = value + 1;
          } catch (const std::exception& e) {
            ++failures;
            ADD_FAILURE() << "thread " << t << ": " << e.what();
          }
        }
      });
    }
  }
  ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "stress did not finish in time";
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(violations, 0) << "tokens must rise in grant order";
  EXPECT_EQ(counters[0] + counters[1], kThreads * kIterations);
  EXPECT_EQ(manager.stats().acquired, static_cast<std::uint64_t>(kThreads * kIterations));
  std::cout << GetParam().label << ": contended " << manager.stats().contended << ", retried after deadlocks "
            << manager.stats().retried << "\n";
}

INSTANTIATE_TEST_SUITE_P(Backends, ModeStress,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kPostgresAdvisory, dblock::test::kMysqlTable,
                              dblock::test::kMysqlAdvisory, dblock::test::kSqlite, dblock::test::kSqliteQueued,
                              dblock::test::kPgBouncerTable})),
                         [](const auto& info) { return std::string(info.param.label); });

INSTANTIATE_TEST_SUITE_P(Backends, Stress,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kSqlite,
                              dblock::test::kSqliteQueued, dblock::test::kPgBouncerTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });
INSTANTIATE_TEST_SUITE_P(Backends, GroupStress,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kSqlite,
                              dblock::test::kSqliteQueued, dblock::test::kPgBouncerTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
