// "My scheduled job runs once": the test of nightly_report.hpp on dblock::testing. A day of the
// database's clock passes in one call.

#include "nightly_report.hpp"

#include <dblock/testing.hpp>

#include <gtest/gtest.h>

using namespace std::chrono_literals;

namespace {

/// Moves the clocks to 02:00 UTC of the next day (the hosts' timers fire then).
void advance_to_two_in_the_morning(dblock::testing::TestStore& db) {
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(db.database_now().time_since_epoch());
  auto into_day = now % std::chrono::milliseconds(24h);
  db.advance(24h - into_day + 2h);
}

}  // namespace

TEST(NightlyReport, RunsOncePerDayWhicheverHostFiresAndHowever) {
  dblock::testing::TestStore db;
  dblock::LockManager host_a(db.store()), host_b(db.store());
  int runs = 0;
  auto report = [&] {
    ++runs;
    return true;
  };
  advance_to_two_in_the_morning(db);
  EXPECT_TRUE(run_nightly_report(db.store(), host_a, report));
  EXPECT_FALSE(run_nightly_report(db.store(), host_b, report)) << "the other host, a minute later";
  db.advance(6h);
  EXPECT_FALSE(run_nightly_report(db.store(), host_a, report)) << "a timer that fires twice";
  EXPECT_EQ(runs, 1);
  advance_to_two_in_the_morning(db);
  EXPECT_TRUE(run_nightly_report(db.store(), host_b, report)) << "the next day";
  EXPECT_EQ(runs, 2);
}

TEST(NightlyReport, AFailedRunIsNotRunAgainTheSameDay) {
  dblock::testing::TestStore db;
  dblock::LockManager host(db.store());
  int runs = 0;
  advance_to_two_in_the_morning(db);
  EXPECT_TRUE(run_nightly_report(db.store(), host, [&] {
    ++runs;
    return false;
  }));
  EXPECT_FALSE(run_nightly_report(db.store(), host, [&] { return ++runs > 0; }));
  EXPECT_EQ(runs, 1);
  auto records = dblock::occurrences(*db.store());
  ASSERT_EQ(records.size(), 1U);
  EXPECT_EQ(records[0].status, dblock::OccurrenceStatus::failed);
}

TEST(NightlyReport, AHostThatCannotReachTheDatabaseRunsNothing) {
  dblock::testing::TestStore db;
  dblock::LockManager host(db.store());
  advance_to_two_in_the_morning(db);
  db.inject(dblock::testing::Statements::acquire, dblock::testing::Fault::disconnect);
  int runs = 0;
  EXPECT_THROW(run_nightly_report(db.store(), host, [&] { return ++runs > 0; }), dblock::ConnectionError);
  EXPECT_EQ(runs, 0);
  EXPECT_TRUE(run_nightly_report(db.store(), host, [&] { return ++runs > 0; })) << "the next firing runs it";
  EXPECT_EQ(runs, 1);
}
