// "My job stops when its lock is lost": the test of export_job.hpp, against the public headers and
// dblock::testing only. No server, no sleeps: the test moves the clocks and injects the faults.

#include "export_job.hpp"

#include <dblock/testing.hpp>

#include <vector>

#include <gtest/gtest.h>

using namespace std::chrono_literals;

TEST(ExportJob, StopsAtTheNextStepOnceItsLockIsLost) {
  dblock::testing::TestStore db;
  std::vector<int> written;
  ExportJob job(db.store(), [&](int step) {
    written.push_back(step);
    if (step == 2) db.expire("export");  // halfway, the database ends its lease
  });
  EXPECT_EQ(job.run(10), 3);
  EXPECT_EQ(written, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(db.losses("export").size(), 1U);
}

TEST(ExportJob, StopsWhenItsLeaseRunsOutDuringALongStepWhileRenewalsHang) {
  dblock::testing::TestStore db;
  db.inject(dblock::testing::Statements::renew, dblock::testing::Fault::stall);  // the renewals hang
  int steps = 0;
  ExportJob job(db.store(),
                [&](int) {
                  ++steps;
                  db.advance(12s);  // each step takes 12 s: the 30 s lease runs out during the third
                },
                {.default_ttl = 30s});
  EXPECT_EQ(job.run(10), 3);
  EXPECT_EQ(steps, 3);
  db.unstall();
}

TEST(ExportJob, RunsToTheEndWhileItsLockIsRenewedAndLeavesTheNameToOneHostAtATime) {
  dblock::testing::TestStore db;
  int steps = 0;
  ExportJob other_host(db.store(), [](int) {});
  ExportJob job(db.store(), [&](int) {
    ++steps;
    db.advance(1min);  // long steps: the watchdog renews the lease meanwhile
    EXPECT_EQ(other_host.run(1), 0) << "the other host finds the name taken";
  });
  EXPECT_EQ(job.run(5), 5);
  EXPECT_TRUE(db.losses().empty());
  EXPECT_EQ(other_host.run(1), 1) << "released at the end";
}
