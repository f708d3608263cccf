// "My leader steps down": the test of scheduler.hpp on dblock::testing. The election's campaign
// runs on its own thread; the test waits for the events the scheduler reports (bounded), never
// for a guessed time.

#include "scheduler.hpp"

#include <dblock/testing.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

using namespace std::chrono_literals;

namespace {

/// What the scheduler reported, and a bounded wait for the next report.
class Reports {
 public:
  void add(bool leading) {
    {
      std::lock_guard lock(mutex_);
      seen_.push_back(leading);
    }
    changed_.notify_all();
  }
  bool wait_for_count(std::size_t count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 30s, [&] { return seen_.size() >= count; });
  }
  std::vector<bool> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> seen_;
};

}  // namespace

TEST(Scheduler, StepsDownTheMomentAnotherOwnerTakesTheTermAndLeadsAgainAfterIt) {
  dblock::testing::TestStore db;
  Reports reports;
  Scheduler scheduler(db.store(), [&](bool leading) { reports.add(leading); });
  ASSERT_TRUE(reports.wait_for_count(1));
  int dispatched = 0;
  EXPECT_TRUE(scheduler.dispatch([&] { ++dispatched; }));

  auto intruder = db.steal("scheduler");
  // steal() returns once the holder was told: stepped down already.
  EXPECT_EQ(reports.seen(), (std::vector<bool>{true, false}));
  EXPECT_FALSE(scheduler.dispatch([&] { ++dispatched; }));
  EXPECT_EQ(dispatched, 1);

  intruder.release();
  ASSERT_TRUE(reports.wait_for_count(3)) << "elected again once the name is free";
  EXPECT_EQ(reports.seen(), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(scheduler.dispatch([&] { ++dispatched; }));
}

TEST(Scheduler, StepsDownWhenItsLeaseRunsOutWhileTheDatabaseHangs) {
  dblock::testing::TestStore db;
  Reports reports;
  Scheduler scheduler(db.store(), [&](bool leading) { reports.add(leading); });
  ASSERT_TRUE(reports.wait_for_count(1));
  db.inject(dblock::testing::Statements::renew, dblock::testing::Fault::stall);
  // Its local deadline: the 30 s lease less the clock-rate allowance (301 ms).
  db.advance(29698ms);
  EXPECT_TRUE(scheduler.dispatch([] {})) << "within its lease";
  EXPECT_EQ(reports.seen(), std::vector<bool>{true});
  db.advance(1ms);
  // Stepped down at the deadline. (Its own campaign may win the name again at once: the row is
  // still its owner's, and nobody else wants it.)
  auto seen = reports.seen();
  ASSERT_GE(seen.size(), 2U);
  EXPECT_EQ(seen[1], false);
  db.unstall();
}
