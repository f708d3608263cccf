// dblock::testing on its own: the clocks the test moves, the faults, what it records, and
// Lock::stop_token(). Public headers only, as a user's test would be (plus the gtest helpers).
// Nothing here waits on real time: every step is a move of the test's clock.

#include <dblock/dblock.hpp>
#include <dblock/testing.hpp>
#include <dblock/testing/gtest.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace {

using namespace std::chrono_literals;
using dblock::testing::Fault;
using dblock::testing::HeldWithToken;
using dblock::testing::IsLost;
using dblock::testing::NotHeld;
using dblock::testing::Statements;
using dblock::testing::StopRequested;
using dblock::testing::TestStore;
using ::testing::Not;

dblock::ManagerOptions options_with_ttl(std::chrono::milliseconds ttl) {
  dblock::ManagerOptions options;
  options.default_ttl = ttl;
  return options;
}

TEST(TestingKit, ExpireTellsTheHolderAtOnceRequestsItsStopTokenAndFreesTheName) {
  TestStore db;
  std::vector<std::int64_t> on_lost_tokens;
  auto options = options_with_ttl(30s);
  options.on_lost = [&](std::string_view, std::int64_t token) { on_lost_tokens.push_back(token); };
  dblock::LockManager locks(db.store(), options);
  auto lock = locks.acquire("job", 0ms);
  auto token = lock.token();
  auto stop = lock.stop_token();
  std::atomic<bool> callback_ran{false};
  std::stop_callback on_stop(stop, [&] { callback_ran = true; });
  EXPECT_THAT(lock, Not(IsLost()));
  EXPECT_FALSE(stop.stop_requested());

  ASSERT_TRUE(db.expire("job"));

  EXPECT_THAT(lock, IsLost());
  EXPECT_THAT(lock, StopRequested());
  EXPECT_TRUE(callback_ran.load());
  EXPECT_EQ(on_lost_tokens, std::vector<std::int64_t>{token});
  EXPECT_TRUE(dblock::testing::lost_once(db, "job"));
  EXPECT_THAT(db.holder("job"), NotHeld());
  // The name is free at once (no lock-delay): another manager takes it with a greater token.
  dblock::LockManager others(db.store());
  auto next = others.try_acquire("job");
  ASSERT_TRUE(next);
  EXPECT_GT(next->token(), token);
  EXPECT_TRUE(dblock::testing::tokens_rise(db, "job"));
  EXPECT_FALSE(db.expire("nothing-held")) << "no live holder: nothing to expire";
}

TEST(TestingKit, AdvanceRenewsAHeldLockAtItsIntervalsForAsLongAsTheTestLikes) {
  TestStore db;
  dblock::LockManager locks(db.store(), options_with_ttl(30s));
  auto lock = locks.acquire("job", 0ms);
  db.advance(10min);
  EXPECT_THAT(lock, Not(IsLost()));
  EXPECT_FALSE(lock.stop_token().stop_requested());
  EXPECT_EQ(db.elapsed(), 10min);
  // Renewed every 10 s of the test clock: one lease of 30 s from the last renewal, at 10 min.
  EXPECT_THAT(db.holder("job"), HeldWithToken(lock.token()));
  EXPECT_EQ(db.holder("job")->remaining, 30s) << "the database clock moved with the local one, exactly";
  auto renewals = 0;
  for (const auto& event : db.events())
    if (event.kind == dblock::LockEventKind::renewed) ++renewals;
  EXPECT_EQ(renewals, 60);
  EXPECT_TRUE(db.losses().empty());
  db.advance(2s);
  EXPECT_EQ(db.holder("job")->remaining, 28s);
}

TEST(TestingKit, ALocalDeadlineFollowsTheLocalClock) {
  TestStore db;
  dblock::LockManager locks(db.store(), options_with_ttl(30s));
  auto lock = locks.acquire("job", 0ms);
  // request sent + ttl - the clock-rate allowance (ttl/100 + 1 ms)
  EXPECT_EQ(lock.local_deadline(), db.local_now() + 30s - 301ms);
  db.advance(10s);  // renewed at 10 s
  EXPECT_EQ(lock.local_deadline(), db.local_now() + 30s - 301ms);
}

TEST(TestingKit, AStalledRenewalLosesTheLockAtItsLocalDeadlineAndItsLateReplyRevivesNothing) {
  TestStore db;
  dblock::LockManager locks(db.store(), options_with_ttl(30s));
  auto lock = locks.acquire("job", 0ms);
  auto deadline = lock.local_deadline();
  db.inject(Statements::renew, Fault::stall);
  db.advance(10s);
  EXPECT_EQ(db.stalled(), 1) << "the renewal at 10 s is stalled";
  db.advance(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - db.local_now()) - 1ms);
  EXPECT_THAT(lock, Not(IsLost())) << "1 ms before its local deadline it still holds it";
  db.advance(1ms);
  EXPECT_THAT(lock, IsLost()) << "the deadline timer, not the renewal's return, ends the belief";
  EXPECT_THAT(lock, StopRequested());
  // Not yet free by the database's clock (the lease ends 301 ms later, as the allowance says).
  dblock::LockManager others(db.store(), options_with_ttl(30s));
  EXPECT_FALSE(others.try_acquire("job"));
  db.advance(301ms);
  auto next = others.try_acquire("job");
  ASSERT_TRUE(next) << "free once the lease ended by the database's clock";
  db.unstall();
  EXPECT_EQ(db.stalled(), 0);
  EXPECT_THAT(lock, IsLost()) << "the late renewal found the name another's";
  EXPECT_THAT(*next, Not(IsLost()));
  EXPECT_THAT(db.holder("job"), HeldWithToken(next->token()));
  EXPECT_TRUE(dblock::testing::lost_once(db, "job"));
}

TEST(TestingKit, BusyRenewalsAreRetriedAndTheLockKept) {
  TestStore db;
  dblock::LockManager locks(db.store(), options_with_ttl(30s));
  auto lock = locks.acquire("job", 0ms);
  db.inject(Statements::renew, Fault::busy, 2);
  db.advance(30s);
  EXPECT_THAT(lock, Not(IsLost()));
  EXPECT_GE(locks.stats().retried, 1U);
}

TEST(TestingKit, RenewalsThatFailUntilTheDeadlineLoseTheLockAndEachFailureIsReported) {
  TestStore db;
  dblock::LockManager locks(db.store(), options_with_ttl(30s));
  auto lock = locks.acquire("job", 0ms);
  db.inject(Statements::renew, Fault::error, 1000);
  db.advance(29s);
  EXPECT_THAT(lock, Not(IsLost()));
  db.advance(1s);
  EXPECT_THAT(lock, IsLost());
  db.clear_faults();
  auto failures = 0;
  for (const auto& event : db.events())
    if (event.kind == dblock::LockEventKind::renew_failed) ++failures;
  // Every 10 s, then every 2.5 s after a failure (a quarter of the interval): 10, 12.5, ..., 27.5 s.
  EXPECT_EQ(failures, 8);
}

TEST(TestingKit, ADroppedConnectionFailsTheRenewalAndTheNextOneKeepsTheLock) {
  TestStore db;
  dblock::LockManager locks(db.store(), options_with_ttl(30s));
  auto lock = locks.acquire("job", 0ms);
  db.inject(Statements::renew, Fault::disconnect);
  db.advance(10s);
  EXPECT_THAT(lock, Not(IsLost()));
  db.advance(30s);
  EXPECT_THAT(lock, Not(IsLost()));
  EXPECT_THAT(db.holder("job"), HeldWithToken(lock.token()));
}

TEST(TestingKit, AnAcquisitionWhoseReplyWasLostIsResolvedByReadingTheRow) {
  TestStore db;
  dblock::LockManager locks(db.store());
  db.inject(Statements::acquire, Fault::reply_lost);
  auto lock = locks.try_acquire("job");
  ASSERT_TRUE(lock) << "the statement ran; the core read the row and found its grant";
  EXPECT_THAT(db.holder("job"), HeldWithToken(lock->token()));
  db.inject(Statements::acquire, Fault::disconnect);
  EXPECT_THROW((void)locks.try_acquire("other"), dblock::ConnectionError);
  EXPECT_THAT(db.holder("other"), NotHeld());
}

TEST(TestingKit, RevokeTellsTheHolderWhichLetsGoOfTheName) {
  TestStore db;
  dblock::LockManager locks(db.store());
  auto lock = locks.acquire("job", 0ms);
  auto revoked = db.revoke("job");
  ASSERT_TRUE(revoked);
  EXPECT_EQ(revoked->token, lock.token());
  EXPECT_THAT(lock, IsLost());
  EXPECT_THAT(lock, StopRequested());
  EXPECT_THROW(lock.release(), dblock::LockLost);
  dblock::LockManager others(db.store());
  EXPECT_TRUE(others.try_acquire("job")) << "free once its holder let go";
}

TEST(TestingKit, RequestReleaseTellsTheHolderAtOnceAndTakesNothing) {
  TestStore db;
  std::atomic<int> told{0};
  std::atomic<std::int64_t> told_token{0};
  dblock::LockManager locks(db.store(), {.on_release_requested = [&](std::string_view, std::int64_t token) {
                              told_token = token;
                              ++told;
                            }});
  auto lock = locks.acquire("job", 0ms);
  EXPECT_FALSE(lock.release_requested());
  auto asked = db.request_release("job");
  ASSERT_TRUE(asked);
  EXPECT_EQ(asked->token, lock.token());
  EXPECT_TRUE(lock.release_requested()) << "told by the renewal the request ran";
  EXPECT_EQ(told.load(), 1);
  EXPECT_EQ(told_token.load(), lock.token());
  EXPECT_THAT(lock, Not(IsLost()));
  db.advance(5min);
  EXPECT_THAT(lock, Not(IsLost())) << "an asked lock is still renewed";
  EXPECT_EQ(told.load(), 1) << "once per grant";
  EXPECT_FALSE(db.request_release("other"));
  lock.release();
  EXPECT_THAT(db.holder("job"), NotHeld());
}

TEST(TestingKit, StealGivesTheNameToAnotherOwnerWithAGreaterToken) {
  TestStore db;
  dblock::LockManager locks(db.store());
  auto lock = locks.acquire("job", 0ms);
  auto stolen = db.steal("job");
  EXPECT_GT(stolen.token(), lock.token());
  EXPECT_THAT(lock, IsLost());
  EXPECT_THAT(db.holder("job"), HeldWithToken(stolen.token()));
  EXPECT_THAT(db.holder("job")->owner, ::testing::HasSubstr("dblock-testing-intruder"));
  db.advance(5min);  // the intruder's manager renews on the test clock too
  EXPECT_THAT(stolen, Not(IsLost()));
  EXPECT_TRUE(dblock::testing::tokens_rise(db, "job"));
}

TEST(TestingKit, ALockDelayAndAMinimumHoldFollowTheDatabaseClock) {
  TestStore db;
  dblock::LockManager locks(db.store());
  dblock::LockManager others(db.store());
  {
    auto lock = locks.acquire("delayed", 0ms, {.lock_delay = 5s});
    ASSERT_TRUE(db.expire("delayed"));
    EXPECT_THAT(lock, IsLost());
    EXPECT_THROW(db.steal("delayed"), std::logic_error) << "unavailable for its lock-delay";
    db.advance(4999ms);
    EXPECT_FALSE(others.try_acquire("delayed"));
    db.advance(1ms);
    EXPECT_TRUE(others.try_acquire("delayed"));
  }
  {
    auto lock = locks.acquire("held-a-while", 0ms, {.min_hold = 1min});
    lock.release();
    db.advance(59s);
    EXPECT_FALSE(others.try_acquire("held-a-while"));
    db.advance(1s);
    EXPECT_TRUE(others.try_acquire("held-a-while"));
  }
}

TEST(TestingKit, AnOccurrenceRunsOnceAndTheNextPeriodRunsAgain) {
  TestStore db;
  dblock::LockManager locks(db.store());
  auto run_job = [&] {
    auto lock = locks.try_acquire("report");
    if (!lock) return false;
    auto run = dblock::Occurrence::claim(db.store(), *lock, {.period = 1h});
    if (!run.claimed()) return false;
    run.finish(0);
    return true;
  };
  // Aligned to the start of a period, so that "an hour later" is the next occurrence.
  auto since_epoch = db.database_now().time_since_epoch();
  db.advance(1h - std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch % 1h) + 1min);
  EXPECT_TRUE(run_job());
  EXPECT_FALSE(run_job()) << "the same occurrence";
  db.advance(30min);
  EXPECT_FALSE(run_job()) << "still the same occurrence";
  db.advance(30min);
  EXPECT_TRUE(run_job()) << "the next one";
  EXPECT_EQ(dblock::occurrences(*db.store()).size(), 2U);
}

TEST(TestingKit, TheReaperDeletesWhatTheDatabaseClockHasExpired) {
  TestStore db;
  dblock::LockManager locks(db.store(), options_with_ttl(30s));
  db.inject(Statements::renew, Fault::stall);
  auto lock = locks.acquire("job", 0ms);
  dblock::Reaper reaper(db.store());
  EXPECT_EQ(reaper.run_once().rows, 0U);
  db.advance(31s);
  EXPECT_THAT(lock, IsLost());
  EXPECT_EQ(reaper.run_once().rows, 1U);
  db.unstall();
}

TEST(TestingKit, AFencedTransactionRunsForTheHolderAndIsRefusedOnceItsLeaseWasExpired) {
  TestStore db;
  dblock::LockManager locks(db.store());
  auto lock = locks.acquire("job", 0ms);
  bool ran = false;
  db.store()->fenced(lock, [&](dblock::FencedTransaction&) { ran = true; });
  EXPECT_TRUE(ran);
  ASSERT_TRUE(db.expire("job"));
  EXPECT_THROW(db.store()->fenced(lock, [&](dblock::FencedTransaction&) {}), dblock::LockLost);
}

TEST(TestingKit, ALeaderStepsDownWhenItsTermIsStolen) {
  TestStore db;
  std::atomic<int> elected{0}, revoked{0};
  std::promise<void> first_term;
  dblock::ElectionOptions options;
  options.on_elected = [&](std::int64_t) {
    if (++elected == 1) first_term.set_value();
  };
  options.on_revoked = [&] { ++revoked; };
  dblock::LeaderElection election(db.store(), "leader", options);
  // Its campaign thread acquires on its own thread: the test waits for the event it reports.
  ASSERT_EQ(first_term.get_future().wait_for(30s), std::future_status::ready);
  ASSERT_TRUE(election.is_leader());
  auto stolen = db.steal("leader");
  EXPECT_FALSE(election.is_leader());
  EXPECT_EQ(revoked.load(), 1);
  EXPECT_EQ(elected.load(), 1);
}

TEST(TestingKit, AManagerEndedWhileItsRenewalIsStalledEndsWithoutAnUnstall) {
  TestStore db;
  {
    dblock::LockManager locks(db.store());
    auto lock = locks.acquire("job", 0ms);
    db.inject(Statements::renew, Fault::stall);
    db.advance(10s);
    EXPECT_EQ(db.stalled(), 1);
  }  // the manager joins its watchdog: the stall lets it go
  EXPECT_EQ(db.stalled(), 0);
}

TEST(TestingKit, EventsOfAManagerThatOutlivesTheTestStoreGoNowhere) {
  std::unique_ptr<dblock::LockManager> survivor;
  {
    TestStore db;
    survivor = std::make_unique<dblock::LockManager>(db.store());
    auto lock = survivor->acquire("job", 0ms);
    EXPECT_EQ(db.grants("job").size(), 1U);
  }
  auto after = survivor->try_acquire("job");  // its store lives on with it (the file unlinked)
  EXPECT_TRUE(after);
}

TEST(TestingKit, TimeNeverMovesBack) {
  TestStore db;
  EXPECT_THROW(db.advance(-1ms), dblock::InvalidArgument);
  auto before = db.database_now();
  db.advance(0ms);
  EXPECT_EQ(db.database_now(), before);
}

}  // namespace
