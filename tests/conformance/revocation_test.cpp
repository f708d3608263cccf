// Revocation (Store::revoke, `dblock release --force`) and the minimum hold (LockOptions::min_hold,
// `dblock run --min-hold`), on every backend in table mode: a forced release never makes two
// holders, and a lock with a minimum hold keeps its name until grant + min_hold.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/build_paths.hpp"
#include "support/cli_case.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"
#include "support/grant_ends.hpp"
#include "support/installation.hpp"
#include "support/processes.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

namespace {

using dblock::test::read_text;

/// Wall-clock nanoseconds written by `date +%s%N` into `path` (0 while it is not there yet).
long long stamp(const std::filesystem::path& path) {
  auto text = read_text(path);
  return text.empty() ? 0 : std::stoll(text);
}

class Revocation : public dblock::test::CliCaseTest {};

TEST_P(Revocation, TheRevokedHolderIsToldAtItsNextRenewalAndItsReleaseFreesTheNameBeforeTheLeaseEnds) {
  std::promise<std::int64_t> lost;
  // A 9 s lease renewed every second: on a loaded machine the CLI-free checks below still fit in it.
  auto a = manager({.default_ttl = 9s, .renew_interval = 1s, .on_lost = [&](std::string_view, std::int64_t token) {
                      lost.set_value(token);
                    }});
  auto b = manager();
  auto held = a->try_acquire("revoked");
  ASSERT_TRUE(held);
  auto revoked = store_->revoke("revoked");
  ASSERT_TRUE(revoked);
  auto free_by = Steady::now() + revoked->remaining;
  EXPECT_EQ(revoked->state, dblock::LockState::revoked);
  EXPECT_EQ(revoked->token, held->token());
  EXPECT_GT(revoked->remaining, 1s) << "the lease is kept, not cut";
  EXPECT_FALSE(b->try_acquire("revoked")) << "nobody is granted the name while the revoked holder may still work";
  EXPECT_FALSE(store_->revoke("revoked")) << "a revoked lock is not revoked again";

  auto told = lost.get_future();
  ASSERT_EQ(told.wait_for(5s), std::future_status::ready) << "told at its next renewal (every second)";
  EXPECT_EQ(told.get(), held->token());
  EXPECT_TRUE(held->lost());
  ASSERT_LT(Steady::now() + 300ms, free_by) << "the checks below need the revoked lease to be running";
  EXPECT_FALSE(b->try_acquire("revoked")) << "told is not stopped: the name still waits";
  EXPECT_FALSE(a->try_acquire("revoked")) << "nor can the revoked holder take it back";

  EXPECT_THROW(held->release(), dblock::LockLost) << "its release is its acknowledgement, and reports the loss";
  auto next = b->try_acquire("revoked");
  EXPECT_TRUE(next) << "the acknowledgement frees the name before the revoked lease ends";
  EXPECT_LT(Steady::now(), free_by);
  if (next) {
    EXPECT_GT(next->token(), revoked->token);
  }
}

TEST_P(Revocation, WithoutAnAcknowledgementAWaiterIsGrantedAtTheRevokedLeasesEndNeitherEarlierNorMuchLater) {
  // 6 s: two CLI runs below must see the revoked lease while it runs, also under a sanitizer.
  auto a = manager({.default_ttl = 6s});
  auto held = a->try_acquire("unacknowledged");  // kept to the end: a holder that never lets go
  ASSERT_TRUE(held);
  auto revoked = store_->revoke("unacknowledged");
  ASSERT_TRUE(revoked);
  auto lease_end = Steady::now() + revoked->remaining;

  auto listed = row("unacknowledged");
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->state, dblock::LockState::revoked);
  EXPECT_EQ(listed->token, held->token());
  EXPECT_FALSE(listed->owner.starts_with("(")) << "shown as the holder it was revoked from: " << listed->owner;
  auto json = cli({"locks", "--json"});
  EXPECT_NE(json.output.find("\"state\":\"revoked\""), std::string::npos) << json.output;
  auto text = cli({"locks"});
  EXPECT_NE(text.output.find(" revoked "), std::string::npos) << text.output;

  auto b = manager();
  auto waiting_from = Steady::now();
  auto next = b->acquire("unacknowledged", 15s);
  auto granted = Steady::now();
  // The database's clock and ours run at the same rate on one host; 100 ms for the reads' latency.
  EXPECT_GE(granted, lease_end - 100ms) << "granted before the revoked lease ended";
  EXPECT_LE(granted, std::max(lease_end, waiting_from) + 3s) << "a waiter polls at least every 500 ms";
  EXPECT_TRUE(held->lost());
  EXPECT_THROW(held->release(), dblock::LockLost);
  EXPECT_FALSE(next.lost()) << "a late acknowledgement never touches the next holder's row";
  EXPECT_EQ(row("unacknowledged")->token, next.token());
}

TEST_P(Revocation, TheUnsafeDeleteFreesTheNameAtOnce) {
  std::promise<void> lost;
  auto a = manager({.default_ttl = 3s, .on_lost = [&](std::string_view, std::int64_t) { lost.set_value(); }});
  auto b = manager();
  auto held = a->try_acquire("deleted");
  ASSERT_TRUE(held);
  EXPECT_TRUE(store_->force_release("deleted"));
  EXPECT_TRUE(b->try_acquire("deleted")) << "deleted at once, live holder or not";
  ASSERT_EQ(lost.get_future().wait_for(5s), std::future_status::ready) << "told at its next renewal (every second)";
}

// Each grant ends exactly once in the event hook, so in dblock_held_locks, the hold histogram and
// the spans, whichever release found its row revoked or deleted by force: one sent by its caller
// (LockLost), or one written behind, whose caller was told `released` before the manager's writer
// found the row revoked or gone. The reported case: the hook saw `released` and then `lost`, and the
// held-locks gauge stayed at -1 for good.
TEST_P(Revocation, ARevokedOrDeletedGrantEndsOnceWhetherItsReleaseIsWrittenBehindOrNot) {
  constexpr int kNames = 8;     // released at once: those that find another release out are written behind
  constexpr int kRounds = 50;   // a bound: the first round nearly always writes some behind
  dblock_test::GrantEnds ends;  // outlives the manager, whose last events come as it ends
  // A 60 s lease renewed every 20 s: no renewal finds a revocation before its holder lets go.
  auto locks = manager({.default_ttl = 60s, .on_event = ends.hook(0), .write_behind_releases = true});
  std::vector<std::string> names;
  int sent_by_caller = 0;
  for (int round = 0; round < kRounds && (locks->stats().written_behind == 0 || sent_by_caller == 0); ++round) {
    std::vector<dblock::Lock> held;
    for (int i = 0; i < kNames; ++i) {
      names.push_back(fmt::format("ends-{}-{}", round, i));
      auto lock = locks->try_acquire(names.back());
      ASSERT_TRUE(lock) << names.back();
      held.push_back(std::move(*lock));
      if (i % 2 == 0) {
        ASSERT_TRUE(store_->revoke(names.back())) << names.back();
      } else {
        ASSERT_TRUE(store_->force_release(names.back())) << names.back();
      }
    }
    std::latch start(kNames);
    std::atomic<int> lost_on_release{0};
    std::vector<std::jthread> releasers;
    for (auto& lock : held)
      releasers.emplace_back([&start, &lost_on_release, &lock] {
        start.arrive_and_wait();
        try {
          lock.release();
        } catch (const dblock::LockLost&) {
          ++lost_on_release;  // sent by its caller, which found the row revoked or gone
        }
      });
    releasers.clear();
    sent_by_caller += lost_on_release.load();
  }
  ASSERT_GT(locks->stats().written_behind, 0U) << "no release was written behind in " << kRounds << " rounds";
  ASSERT_GT(sent_by_caller, 0);
  // The writer has settled every name once an acquisition through the manager got it (it waits for
  // a release written behind of its name); revoked names are free, their holder having let go.
  for (const auto& name : names) EXPECT_TRUE(locks->try_acquire(name)) << name;
  auto stats = locks->stats();
  locks.reset();  // its end joins the deadline timer: no report about these grants comes later
  EXPECT_EQ(ends.unbalanced(), "");
  EXPECT_EQ(ends.held(), 0) << "dblock_held_locks would not be back at 0";
  EXPECT_EQ(stats.lost, static_cast<std::uint64_t>(sent_by_caller)) << "stats().lost counts what the hook reported";
}

TEST_P(Revocation, AReleaseWithinTheMinimumHoldKeepsTheNameUntilGrantPlusMinHold) {
  auto a = manager();
  auto b = manager();
  auto started = Steady::now();
  // 4 s: the checks below must come within it, also on a loaded machine.
  auto held = a->try_acquire("hourly", {.min_hold = 4s});
  ASSERT_TRUE(held);
  EXPECT_NO_THROW(held->release()) << "a release within the minimum hold is a release";
  EXPECT_FALSE(b->try_acquire("hourly")) << "the name is kept for the minimum hold";
  EXPECT_FALSE(a->try_acquire("hourly")) << "from the releaser too";
  auto kept = row("hourly");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->state, dblock::LockState::min_hold);
  EXPECT_FALSE(store_->revoke("hourly")) << "nobody holds it: nothing to revoke";
  auto next = b->acquire("hourly", 15s);
  auto waited = Steady::now() - started;
  EXPECT_GE(waited, 3900ms) << "free only at grant + min_hold (100 ms for the grant's reply)";
  EXPECT_LE(waited, 9s) << "free at grant + min_hold, not held to the lease's end (30 s)";
  next.release();
  EXPECT_TRUE(a->try_acquire("hourly")) << "without a minimum hold a release frees the name at once";
}

TEST_P(Revocation, AReleaseAfterTheMinimumHoldFreesTheNameAtOnce) {
  auto a = manager();
  auto b = manager();
  auto held = a->try_acquire("short-hold", {.min_hold = 200ms});
  ASSERT_TRUE(held);
  std::this_thread::sleep_for(300ms);  // the job itself: longer than its minimum hold
  held->release();
  EXPECT_TRUE(b->try_acquire("short-hold"));
  EXPECT_THROW((void)a->try_acquire("x", {.shared = true, .min_hold = 1s}), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire("x", {.min_hold = -1ms}), dblock::InvalidArgument);
}

TEST_P(Revocation, AfterReleaseForceNoWaitingRunStartsWhileTheRevokedRunsCommandStillRuns) {
  auto a_end = dir_ / "a_end", a_start = dir_ / "a_start", b_start = dir_ / "b_start";
  // 6 s leases: with 2 s, on a loaded machine, the waiter once lost its own lease (70), and the
  // bound below is the revoked lease's end.
  auto holder = start_cli({"run", "--name", "job", "--ttl", "6s", "--", "sh", "-c",
                           "trap 'date +%s%N > " + a_end.string() + "; exit 0' TERM; date +%s%N > " + a_start.string() +
                               "; sleep 30 & wait"});
  ASSERT_TRUE(dblock::test::eventually([&] { return stamp(a_start) > 0; })) << holder.output();
  auto waiter = start_cli(
      {"run", "--name", "job", "--ttl", "6s", "--wait", "30s", "--", "sh", "-c", "date +%s%N > " + b_start.string()});
  auto released = cli({"release", "--force", "job"});
  EXPECT_EQ(released.exit_code, 0) << released.output;
  EXPECT_NE(released.output.find("revoked 'job'"), std::string::npos) << released.output;
  auto held_out = holder.finish();
  auto waited_out = waiter.finish();
  EXPECT_EQ(held_out.exit_code, 70) << "told it lost the lock: " << held_out.output;
  EXPECT_NE(held_out.output.find("lost"), std::string::npos) << held_out.output;
  ASSERT_EQ(waited_out.exit_code, 0) << waited_out.output;
  ASSERT_GT(stamp(a_end), 0) << held_out.output;
  EXPECT_GT(stamp(b_start), stamp(a_end))
      << "the waiter's command started " << (stamp(a_end) - stamp(b_start)) / 1'000'000
      << " ms before the revoked holder's command ended";
  // The waiter was granted within its --wait of five leases (exit 0): the revoked lease was not
  // renewed. How soon after the revocation is the library's to show (the test kit's
  // RevokeTellsTheHolderWhichLetsGoOfTheName, on a clock the test moves), not a wall-clock bound
  // that a loaded machine can miss.
}

TEST_P(Revocation, RunWithAMinimumHoldKeepsTheNameAfterItsCommandEnds) {
  auto started = Steady::now();
  // 5 s: the two CLI runs after the first must come within it, also under a sanitizer.
  auto first = cli({"run", "--name", "nightly", "--min-hold", "5s", "--", "true"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(cli({"run", "--name", "nightly", "--", "true"}).exit_code, 75) << "kept for its minimum hold";
  EXPECT_NE(cli({"locks", "--json"}).output.find("\"state\":\"min-hold\""), std::string::npos);
  auto later = cli({"run", "--name", "nightly", "--wait", "15s", "--", "true"});
  EXPECT_EQ(later.exit_code, 0) << later.output;
  EXPECT_GE(Steady::now() - started, 4900ms);
  EXPECT_EQ(cli({"run", "--name", "nightly", "--mode", "advisory", "--min-hold", "1s", "--", "true"}).exit_code, 64);
}

INSTANTIATE_TEST_SUITE_P(Backends, Revocation,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kSqlite,
                              dblock::test::kPgBouncerTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
