// Policy tests of the core that used to wait on real leases (tests/unit/core_policy_test.cpp, over
// the scripted backend with 150-300 ms leases and checks that had to fall within a window of real
// time): here on dblock::testing's clocks, so each check is exact and no load can fail it. They
// test the core's policy, on the SQLite backend's real SQL; the database suites stay on servers.

#include <dblock/dblock.hpp>
#include <dblock/testing.hpp>

#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

using namespace std::chrono_literals;
using dblock::testing::Fault;
using dblock::testing::Statements;
using dblock::testing::TestStore;
using LocalTime = std::chrono::steady_clock::time_point;

TEST(CorePolicyOnTheTestClock, AStalledRenewalIsReportedLostAtTheLocalDeadlineNotWhenItReturns) {
  TestStore db;
  std::mutex mutex;
  std::vector<LocalTime> reported;  // when on_lost ran, on the local clock
  dblock::ManagerOptions options;
  options.default_ttl = 150ms;
  options.on_lost = [&](std::string_view, std::int64_t) {
    std::lock_guard lock(mutex);
    reported.push_back(db.local_now());
  };
  dblock::LockManager locks(db.store(), options);
  db.inject(Statements::renew, Fault::stall);  // the first renewal (at 50 ms) hangs past any deadline
  auto sent = db.local_now();
  auto held = locks.try_acquire("stalled");
  ASSERT_TRUE(held);
  auto deadline = held->local_deadline();
  EXPECT_EQ(deadline, sent + 150ms - 2ms) << "send time + TTL - the clock-rate allowance (ttl/100 + 1 ms)";

  db.advance(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - sent) - 1ms);
  EXPECT_EQ(db.stalled(), 1);
  EXPECT_FALSE(held->lost());
  db.advance(1ms);
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(reported, std::vector<LocalTime>{deadline}) << "reported at the deadline, while the renewal hangs";
  }
  EXPECT_TRUE(held->lost());
  EXPECT_TRUE(held->stop_token().stop_requested());

  db.unstall();  // the renewal lands late (the row is renewed in the database: nobody believes it)
  EXPECT_TRUE(held->lost()) << "lost is for good: a renewal that returns late revives nothing";
  EXPECT_EQ(held->local_deadline(), deadline) << "a lost lock's deadline never moves again";
  auto other = locks.try_acquire("after-the-stall");
  ASSERT_TRUE(other);
  db.advance(1s);
  EXPECT_FALSE(other->lost()) << "the watchdog goes on after the stall";
  EXPECT_THROW(held->release(), dblock::LockLost);
  std::lock_guard lock(mutex);
  EXPECT_EQ(reported.size(), 1U);
}

TEST(CorePolicyOnTheTestClock, AReentryWithAShorterTtlNeverShortensTheLeaseOrItsRenewals) {
  TestStore db;
  dblock::LockManager locks(db.store(), {.default_ttl = 300ms});
  auto outer = locks.try_acquire("nested", {.ttl = 900ms});
  ASSERT_TRUE(outer);
  auto first_deadline = outer->local_deadline();
  auto inner = locks.try_acquire("nested", {.ttl = 300ms});
  ASSERT_TRUE(inner);
  EXPECT_EQ(inner->local_deadline(), first_deadline);
  EXPECT_EQ(db.holder("nested")->remaining, 900ms) << "the database keeps the longer lease";
  db.advance(100ms);  // the first renewal (every 300/3 ms)
  EXPECT_EQ(db.holder("nested")->remaining, 900ms) << "renewals ask for the longest TTL held";
  EXPECT_EQ(inner->local_deadline(), db.local_now() + 900ms - 10ms);
  db.advance(5s);
  EXPECT_FALSE(outer->lost());
  EXPECT_EQ(db.holder("nested")->remaining, 900ms);
}

TEST(CorePolicyOnTheTestClock, AnotherOwnersGrantOfTheSameNameDoesNotKeepAStaleHolderAlive) {
  TestStore db;
  dblock::LockManager locks(db.store(), {.default_ttl = 150ms});
  db.inject(Statements::renew, Fault::stall);
  auto stale = locks.try_acquire("shared-name");
  ASSERT_TRUE(stale);
  // Its renewal hangs; its lease ends by the database's clock and another thread of the same
  // manager (another owner) takes the name over.
  db.advance(150ms);
  EXPECT_TRUE(stale->lost());
  std::optional<dblock::Lock> fresh;
  std::thread([&] { fresh = locks.try_acquire("shared-name"); }).join();
  ASSERT_TRUE(fresh);
  EXPECT_GT(fresh->token(), stale->token());
  db.unstall();  // the stale renewal lands: it matches the token, and the row is the fresh one's
  db.advance(1s);
  EXPECT_TRUE(stale->lost()) << "renewing the other owner's row must not count for this one";
  EXPECT_FALSE(fresh->lost());
  EXPECT_EQ(db.holder("shared-name")->token, fresh->token());
  EXPECT_EQ(db.losses("shared-name").size(), 1U);
}

}  // namespace
