// Multi-locks (LockManager::acquire_all) and LeaderElection, on every backend and mode: they are
// built on the lock path alone, so the conformance cases below hold wherever locks do.

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/admin.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using dblock::test::eventually;

namespace {

class KindsOnLocks : public dblock::test::InstalledCaseTest {
 protected:
  [[nodiscard]] bool advisory() const { return GetParam().mode == dblock::LockMode::advisory; }

  /// Whether a manager of another owner can take `name` now (and gives it back at once).
  bool free_for_others(const std::string& name) { return manager()->try_acquire(name).has_value(); }

  /// Ends the lock of `name` behind its holder's back: row deleted, or the holder's session killed.
  void break_lock(const std::string& name) {
    if (advisory())
      ASSERT_EQ(installation_->admin().kill_advisory_holder(name), 1);
    else
      ASSERT_TRUE(store_->force_release(name));
  }
};

TEST_P(KindsOnLocks, ASetHoldsEveryNameOnceInByteOrderAndReleasesThemTogether) {
  auto a = manager();
  auto set = a->try_acquire_all({"set/c", "set/a", "set/b", "set/a"});
  ASSERT_TRUE(set);
  ASSERT_EQ(set->size(), 3u) << "a name given twice is taken once";
  EXPECT_EQ(set->locks()[0].name(), "set/a");
  EXPECT_EQ(set->locks()[2].name(), "set/c");
  EXPECT_GT(set->at("set/b").token(), 0);
  EXPECT_THROW((void)set->at("set/d"), dblock::InvalidArgument);
  EXPECT_FALSE(set->lost());
  for (const auto* name : {"set/a", "set/b", "set/c"}) EXPECT_FALSE(free_for_others(name)) << name;
  set->release();
  EXPECT_FALSE(set->owns());
  EXPECT_THROW(set->release(), dblock::NotHeld);
  for (const auto* name : {"set/a", "set/b", "set/c"}) EXPECT_TRUE(free_for_others(name)) << name;
}

TEST_P(KindsOnLocks, AFailedSetHoldsNoneOfItsNames) {
  auto holder = manager();
  auto busy = holder->try_acquire("fail/b");
  ASSERT_TRUE(busy);
  auto a = manager();
  EXPECT_FALSE(a->try_acquire_all({"fail/a", "fail/b", "fail/c"}));
  EXPECT_TRUE(free_for_others("fail/a")) << "the name taken before the busy one was given back";
  EXPECT_THROW((void)a->acquire_all({"fail/c", "fail/b", "fail/a"}, 200ms), dblock::Timeout);
  EXPECT_TRUE(free_for_others("fail/a"));
  EXPECT_TRUE(free_for_others("fail/c"));
  EXPECT_THROW((void)a->try_acquire_all({}), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire_all({"fail/a", ""}), dblock::InvalidArgument);
  EXPECT_TRUE(free_for_others("fail/a")) << "bad input is refused before anything is taken";
  if (!advisory()) {  // a minimum hold (table mode) is for a set that was taken, not for a failed one
    EXPECT_FALSE(a->try_acquire_all({"fail/a", "fail/b"}, {.min_hold = 1min}));
    EXPECT_TRUE(free_for_others("fail/a")) << "a failed set kept a name it took for its minimum hold";
  }
  busy->release();
  auto set = a->acquire_all({"fail/c", "fail/b", "fail/a"}, 10s);
  EXPECT_EQ(set.size(), 3u);
}

TEST_P(KindsOnLocks, OverlappingSetsAskedInOppositeOrdersNeverDeadlockAndNeverOverlap) {
  constexpr int kRounds = 15;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  auto worker = [&](std::vector<std::string> names) {
    auto own = manager();
    for (int round = 0; round < kRounds; ++round) {
      auto set = own->acquire_all(names, 30s);
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      inside.fetch_sub(1);
      set.release();
    }
  };
  auto first = std::async(std::launch::async, worker, std::vector<std::string>{"pair/x", "pair/y", "pair/z"});
  auto second = std::async(std::launch::async, worker, std::vector<std::string>{"pair/z", "pair/y"});
  ASSERT_EQ(first.wait_for(90s), std::future_status::ready) << "deadlocked";
  ASSERT_EQ(second.wait_for(90s), std::future_status::ready) << "deadlocked";
  first.get();
  second.get();
  EXPECT_EQ(overlaps.load(), 0);
}

/// What the callbacks of several elections saw, in the order they saw it.
struct ElectionLog {
  void add(std::string entry) {
    std::lock_guard lock(mutex);
    entries.push_back(std::move(entry));
  }
  std::vector<std::string> snapshot() {
    std::lock_guard lock(mutex);
    return entries;
  }
  std::mutex mutex;
  std::vector<std::string> entries;
};

TEST_P(KindsOnLocks, OneLeaderAtATimeAndAResignationElectsTheNextWithALargerToken) {
  ElectionLog log;
  std::atomic<std::int64_t> tokens[2] = {0, 0};
  auto elect = [&](int id) {
    return std::make_unique<dblock::LeaderElection>(
        store_, "leader",
        dblock::ElectionOptions{.on_elected =
                                    [&, id](std::int64_t token) {
                                      tokens[id] = token;
                                      log.add("elected " + std::to_string(id));
                                    },
                                .on_revoked = [&, id] { log.add("revoked " + std::to_string(id)); },
                                .manager = in_mode({.default_ttl = 3s})});
  };
  auto e0 = elect(0);
  auto e1 = elect(1);
  ASSERT_TRUE(eventually([&] { return e0->is_leader() || e1->is_leader(); }));
  // The other keeps campaigning through several slices without being elected.
  auto& leader = e0->is_leader() ? e0 : e1;
  auto& follower = e0->is_leader() ? e1 : e0;
  int leader_id = e0->is_leader() ? 0 : 1;
  EXPECT_FALSE(eventually([&] { return follower->is_leader(); }, 1s));
  // is_leader() turns true just before on_elected runs.
  ASSERT_TRUE(eventually([&] { return leader->token() == tokens[leader_id].load(); }));
  auto first_token = *leader->token();
  leader.reset();  // resigns
  ASSERT_TRUE(eventually([&] { return follower->is_leader(); }));
  EXPECT_GT(*follower->token(), first_token);
  ASSERT_TRUE(eventually([&] { return log.snapshot().size() >= 3; }));
  auto entries = log.snapshot();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0], "elected " + std::to_string(leader_id));
  EXPECT_EQ(entries[1], "revoked " + std::to_string(leader_id)) << "revoked before the next is elected";
  EXPECT_EQ(entries[2], "elected " + std::to_string(1 - leader_id));
}

TEST_P(KindsOnLocks, ALostLeaderIsRevokedAndCampaignsAgain) {
  std::promise<void> revoked;
  std::atomic<int> revocations{0};
  dblock::LeaderElection election(store_, "lossy",
                                  {.on_revoked =
                                       [&] {
                                         if (revocations.fetch_add(1) == 0) revoked.set_value();
                                       },
                                   .manager = in_mode({.default_ttl = 300ms})});
  ASSERT_TRUE(eventually([&] { return election.is_leader(); }));
  auto first_token = *election.token();
  break_lock("lossy");
  ASSERT_EQ(revoked.get_future().wait_for(10s), std::future_status::ready) << "the loss must end the term";
  ASSERT_TRUE(eventually([&] { return election.terms() == 2 && election.is_leader(); })) << "campaigns again";
  EXPECT_GT(*election.token(), first_token);
  EXPECT_EQ(revocations.load(), 1);
  election.resign();
  EXPECT_FALSE(election.is_leader());
  EXPECT_EQ(revocations.load(), 2);
  election.resign();  // idempotent
  EXPECT_EQ(revocations.load(), 2);
  EXPECT_TRUE(free_for_others("lossy"));
}

TEST_P(KindsOnLocks, ElectionsRefuseBadInputBeforeCampaigning) {
  EXPECT_THROW(dblock::LeaderElection(store_, ""), dblock::InvalidArgument);
  EXPECT_THROW(dblock::LeaderElection(nullptr, "x"), dblock::InvalidArgument);
  EXPECT_THROW(dblock::LeaderElection(store_, "x", {.campaign_slice = 0ms}), dblock::InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, KindsOnLocks,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kPostgresAdvisory, dblock::test::kMysqlTable,
                              dblock::test::kMysqlAdvisory, dblock::test::kSqlite, dblock::test::kPgBouncerTable,
                              dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
