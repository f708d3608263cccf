// The behavioural suite of doc/semantics.md, written once and run against every backend and
// mode (INSTANTIATE_TEST_SUITE_P at the bottom). Each test gets its own table prefix.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <sstream>
#include <stop_token>
#include <thread>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "core/store_parts.hpp"
#include "support/admin.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using dblock::test::Admin;
using dblock::test::eventually;

namespace {

using dblock::test::with_params;

class Conformance : public dblock::test::InstalledCaseTest {
 protected:
  void SetUp() override {
    InstalledCaseTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;  // no server: the base skipped or failed already
    prefix_ = installation_->prefix();
    dsn_ = installation_->dsn();
    admin_ = &installation_->admin();
  }

  [[nodiscard]] bool advisory() const { return GetParam().mode == dblock::LockMode::advisory; }

  /// Whether the database holds the lock: its row (table mode) or its server-side advisory lock.
  bool held_in_database(const std::string& name) {
    if (!advisory()) return row(name).has_value();
    return admin_->advisory_held(name);
  }

  /// Advisory mode: ends the server session holding `name`, as a crash or a cut network would.
  void kill_advisory_holder(const std::string& name) { ASSERT_EQ(admin_->kill_advisory_holder(name), 1); }

  std::string prefix_;
  std::string dsn_;
  dblock::test::Admin* admin_ = nullptr;
};

/// Leases, rows and renewal: table mode only (advisory mode has its equivalents below).
class TableConformance : public Conformance {};
/// The advisory equivalents of the table-only cases: the connection, not a lease, holds the lock.
class AdvisoryConformance : public Conformance {};

TEST_P(Conformance, MutualExclusionAcrossManagers) {
  auto a = manager();
  auto b = manager();
  auto held = a->try_acquire("orders/42");
  ASSERT_TRUE(held);
  EXPECT_EQ(held->count(), 1);
  EXPECT_FALSE(b->try_acquire("orders/42"));
  EXPECT_TRUE(b->try_acquire("orders/43")) << "other names are independent";
  held->release();
  EXPECT_TRUE(b->try_acquire("orders/42"));
}

TEST_P(Conformance, OwnerScopeIsTheThreadByDefault) {
  auto a = manager();
  auto held = a->try_acquire("job");
  ASSERT_TRUE(held);
  bool other_thread_got_it = true;
  std::thread([&] { other_thread_got_it = a->try_acquire("job").has_value(); }).join();
  EXPECT_FALSE(other_thread_got_it);

  auto shared = manager({.owner_scope = dblock::OwnerScope::manager});
  auto outer = shared->try_acquire("shared-job");
  ASSERT_TRUE(outer);
  std::optional<dblock::Lock> inner;
  std::thread([&] { inner = shared->try_acquire("shared-job"); }).join();
  ASSERT_TRUE(inner) << "OwnerScope::manager shares ownership between threads";
  EXPECT_EQ(inner->count(), 2);
}

TEST_P(Conformance, ReentrancyCountsUpAndDown) {
  auto a = manager();
  auto b = manager();
  auto outer = a->try_acquire("report");
  auto inner = a->try_acquire("report");
  ASSERT_TRUE(outer && inner);
  EXPECT_EQ(outer->count(), 1);
  EXPECT_EQ(inner->count(), 2);
  EXPECT_EQ(outer->token(), inner->token()) << "re-entry keeps the token";
  if (!advisory()) {
    EXPECT_EQ(row("report")->count, 2);
  }
  inner->release();
  if (!advisory()) {
    EXPECT_EQ(row("report")->count, 1);
  }
  EXPECT_FALSE(b->try_acquire("report")) << "still held after the inner release";
  outer->release();
  EXPECT_FALSE(held_in_database("report")) << "released in the database at zero";
  EXPECT_TRUE(b->try_acquire("report"));
}

TEST_P(Conformance, GuardMovesToAnotherThreadAndReleasesThere) {
  auto a = manager();
  auto held = a->try_acquire("moved");
  ASSERT_TRUE(held);
  EXPECT_TRUE(held_in_database("moved"));
  std::thread([lock = std::move(*held)]() mutable { lock.release(); }).join();
  EXPECT_FALSE(held_in_database("moved"));
}

TEST_P(Conformance, DestructorReleases) {
  auto a = manager();
  {
    auto held = a->try_acquire("scoped");
    ASSERT_TRUE(held);
    EXPECT_TRUE(held_in_database("scoped"));
  }
  EXPECT_FALSE(held_in_database("scoped"));
  auto lock = a->try_acquire("twice");
  ASSERT_TRUE(lock);
  lock->release();
  EXPECT_THROW(lock->release(), dblock::NotHeld);
}

TEST_P(TableConformance, ExpiredLockIsTakenOverWithLargerTokenAndOldReleaseChangesNothing) {
  auto a = manager();
  auto b = manager();
  auto old = a->try_acquire("lease");
  ASSERT_TRUE(old);
  admin_->expire("lease");
  auto fresh = b->try_acquire("lease");
  ASSERT_TRUE(fresh) << "an expired lease is taken over";
  EXPECT_EQ(fresh->count(), 1);
  EXPECT_GT(fresh->token(), old->token());
  EXPECT_THROW(old->release(), dblock::LockLost);
  auto info = row("lease");
  ASSERT_TRUE(info) << "the old holder's release must not delete the new owner's row";
  EXPECT_EQ(info->token, fresh->token());
  EXPECT_EQ(info->count, 1);
}

TEST_P(TableConformance, TheLastReleaseFreesTheNameEvenWhenTheRowCountsALevelNobodyHolds) {
  auto a = manager();
  auto b = manager();
  auto lock = a->try_acquire("orphan-level");
  ASSERT_TRUE(lock);
  // A re-entry whose reply was lost: the row counts a level the manager never handed out.
  auto before = row("orphan-level");
  ASSERT_TRUE(before);
  auto& backend = dblock::detail::StoreParts::backend(*store_).locks();
  auto unseen = backend.try_acquire("orphan-level", before->owner, 30s, before->token);
  ASSERT_TRUE(unseen);
  ASSERT_EQ(unseen->count, 2);
  lock->release();
  EXPECT_FALSE(row("orphan-level")) << "the level nobody holds kept the row until its lease ended";
  EXPECT_TRUE(b->try_acquire("orphan-level"));
}

// An acquisition of the owner that lands after its reply was lost (the owner holds the name again
// by then, under a longer lease) takes the row over with a new token. If it also took the shorter
// lease, the guard believing the longer one would hold on past the row's end, when another owner
// can be granted the name. A takeover asking for longer than the row has takes its own lease.
TEST_P(TableConformance, ATakeoverOfTheOwnersOwnLiveRowNeverShortensItsLease) {
  auto a = manager();
  auto b = manager();
  auto& backend = dblock::detail::StoreParts::backend(*store_).locks();
  std::vector<std::string> names{"late-landing/alone"};
  if (backend.max_batch() > 1) names.push_back("late-landing/combined");
  for (const auto& name : names) {
    auto take_over = [&](const std::string& owner, std::chrono::milliseconds ttl, std::int64_t held_token) {
      if (name.ends_with("alone")) return backend.try_acquire(name, owner, ttl, held_token);
      dblock::detail::AcquireRequest request{name, owner, ttl, held_token, 0ms};
      return backend.try_acquire_many(std::span(&request, 1)).at(0);
    };
    auto lock = a->try_acquire(name, dblock::LockOptions{.ttl = 60s, .lock_delay = 30s});
    ASSERT_TRUE(lock);
    auto first_token = lock->token();
    auto before = row(name);
    ASSERT_TRUE(before);
    auto late = take_over(before->owner, 1s, 0);
    ASSERT_TRUE(late) << name << ": the owner's own live row is taken over";
    EXPECT_EQ(late->count, 1);
    EXPECT_GT(late->token, first_token);
    auto after = row(name);
    ASSERT_TRUE(after);
    EXPECT_GT(after->remaining, 55s) << name << ": the takeover shortened the lease a guard of the owner believes";
    EXPECT_LE(after->remaining, 60s) << name << ": the lease is the longer of the two, nothing added";
    EXPECT_EQ(after->lock_delay, 30s) << name << ": the longer lock-delay is kept";
    EXPECT_FALSE(b->try_acquire(name)) << name;
    EXPECT_THROW(lock->release(), dblock::LockLost) << name << ": the guard's grant was taken over";

    auto longer = take_over(before->owner, 120s, first_token);  // a stale token: a takeover again
    ASSERT_TRUE(longer) << name;
    EXPECT_GT(longer->token, late->token);
    after = row(name);
    ASSERT_TRUE(after);
    EXPECT_GT(after->remaining, 115s) << name << ": a takeover asking for longer gets its own lease";
    EXPECT_EQ(after->lock_delay, 30s) << name;
  }
}

TEST_P(Conformance, TokensIncreaseAcrossDeleteAndRecreate) {
  auto a = manager();
  std::int64_t previous = 0;
  for (int i = 0; i < 5; ++i) {
    auto lock = a->try_acquire("recreated");
    ASSERT_TRUE(lock);
    EXPECT_GT(lock->token(), previous);
    previous = lock->token();
    lock->release();
    EXPECT_FALSE(held_in_database("recreated"));
  }
}

// A lease of 3 s held past two of them: with 300 ms, on a loaded machine (a sanitizer, PgBouncer),
// one renewal 200 ms late lost the lock, and with 1 s a loaded Galera cluster's commits did; a
// manager that stops renewing still loses it at its lease's end, so a lock still held after two
// leases was renewed.
TEST_P(TableConformance, RenewalKeepsLockAlivePastSeveralTtls) {
  constexpr auto kTtl = 3s;
  auto a = manager({.default_ttl = kTtl});
  auto b = manager();
  auto held = a->try_acquire("renewed");
  ASSERT_TRUE(held);
  auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return std::chrono::steady_clock::now() - started > 2 * kTtl; }, 3 * kTtl));
  EXPECT_GE(a->stats().renewals, 2u);
  EXPECT_FALSE(held->lost());
  EXPECT_FALSE(b->try_acquire("renewed")) << "still held after two TTLs";
  EXPECT_GT(row("renewed")->remaining.count(), 0);
  EXPECT_GT(held->local_deadline(), std::chrono::steady_clock::now());
}

TEST_P(TableConformance, LostWhenRowIsStolen) {
  std::promise<std::pair<std::string, std::int64_t>> lost;
  auto a = manager({.default_ttl = 300ms, .on_lost = [&](std::string_view name, std::int64_t token) {
                      lost.set_value({std::string(name), token});
                    }});
  auto held = a->try_acquire("stolen");
  ASSERT_TRUE(held);
  admin_->steal("stolen", "thief");
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "the watchdog must notice within a cycle";
  EXPECT_EQ(future.get(), std::make_pair(std::string("stolen"), held->token()));
  EXPECT_TRUE(held->lost());
  EXPECT_EQ(a->stats().lost, 1u);
  EXPECT_THROW(held->release(), dblock::LockLost);
  EXPECT_EQ(row("stolen")->owner, "thief") << "release must leave the thief's row alone";
}

TEST_P(TableConformance, LostWhenRowIsDeleted) {
  std::promise<void> lost;
  auto a = manager({.default_ttl = 300ms, .on_lost = [&](std::string_view, std::int64_t) { lost.set_value(); }});
  auto held = a->try_acquire("deleted");
  ASSERT_TRUE(held);
  EXPECT_TRUE(store_->force_release("deleted"));
  ASSERT_EQ(lost.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(held->lost());
}

TEST_P(Conformance, WaitTimesOut) {
  auto a = manager();
  auto b = manager();
  auto held = a->try_acquire("busy");
  ASSERT_TRUE(held);
  auto started = std::chrono::steady_clock::now();
  EXPECT_THROW((void)b->acquire("busy", 300ms), dblock::Timeout);
  auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 5s);
  EXPECT_EQ(b->stats().timeouts, 1u);
  EXPECT_THROW((void)b->acquire("busy", 0ms), dblock::Timeout) << "zero timeout: one try";
}

// A stop token (LockManager::acquire's fourth argument) ends a wait as its deadline would, only sooner (the wait asks
// for 120 s): a Timeout that says the wait was stopped, nothing taken, the holder's lock untouched. A token already
// stopped leaves one try.
TEST_P(Conformance, AStopEndsAWaitAsItsDeadlineWouldAndTakesNothing) {
  auto a = manager();
  auto b = manager();
  auto held = a->try_acquire("stopped");
  ASSERT_TRUE(held);
  std::stop_source stop;
  auto waiter = std::async(std::launch::async, [&] {
    try {
      auto lock = b->acquire("stopped", 120s, {}, stop.get_token());
      return std::string("granted");
    } catch (const dblock::Timeout& e) {
      return std::string(e.what());
    }
  });
  ASSERT_TRUE(eventually([&] { return b->stats().contended >= 1; }));
  stop.request_stop();
  ASSERT_EQ(waiter.wait_for(60s), std::future_status::ready) << "the stopped wait went on";
  auto told = waiter.get();
  EXPECT_NE(told.find("its wait was stopped"), std::string::npos) << told;
  EXPECT_TRUE(held_in_database("stopped"));
  EXPECT_EQ(b->stats().timeouts, 1u);
  EXPECT_THROW((void)b->acquire("stopped", 120s, {}, stop.get_token()), dblock::Timeout);
  held->release();
  EXPECT_TRUE(b->try_acquire("stopped").has_value());
}

TEST_P(Conformance, WaiterIsWokenPromptlyByRelease) {
  auto a = manager({.default_ttl = 60s});
  auto b = manager();
  auto held = a->try_acquire("handoff");
  ASSERT_TRUE(held);
  std::promise<void> waiting;
  auto waiter = std::async(std::launch::async, [&] {
    waiting.set_value();
    auto lock = b->acquire("handoff", 30s);
    return std::make_pair(std::chrono::steady_clock::now(), lock.token());
  });
  waiting.get_future().wait();
  // Let the waiter reach its wait: it has then contended at least once.
  ASSERT_TRUE(eventually([&] { return b->stats().contended >= 1; }));
  auto released_at = std::chrono::steady_clock::now();
  held->release();
  ASSERT_EQ(waiter.wait_for(20s), std::future_status::ready);
  auto [acquired_at, token] = waiter.get();
  // Far below the 60 s lease: the waiter was woken by the release, not by the lease's end.
  EXPECT_LT(acquired_at - released_at, 5s);
  EXPECT_GT(token, 0);
}

TEST_P(TableConformance, WaiterAcquiresWhenLeaseRunsOut) {
  auto a = manager({.default_ttl = 60s});
  auto b = manager();
  auto held = a->try_acquire("abandoned");
  ASSERT_TRUE(held);
  auto waiter = std::async(std::launch::async, [&] { return b->acquire("abandoned", 20s).token(); });
  ASSERT_TRUE(eventually([&] { return b->stats().contended >= 1; }));
  admin_->expire("abandoned");  // the holder stalls: no release, no notification
  ASSERT_EQ(waiter.wait_for(20s), std::future_status::ready);
  EXPECT_GT(waiter.get(), held->token());
}

TEST_P(Conformance, BadInputIsRejectedBeforeAnythingIsSent) {
  auto a = manager();
  EXPECT_THROW((void)a->try_acquire(""), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire(std::string(256, 'x')), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire(std::string("a\0b", 3)), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire("bad\xff utf8"), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire("x", {.ttl = -1ms}), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire("x", {.ttl = 1ms}), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire("x", {.ttl = std::chrono::hours(24 * 365)}), dblock::InvalidArgument);
  EXPECT_THROW((void)a->acquire("x", -1s), dblock::InvalidArgument);
  EXPECT_THROW(manager({.default_ttl = 0ms}), dblock::InvalidArgument);
  EXPECT_THROW(manager({.default_ttl = 3s, .renew_interval = 2s}), dblock::InvalidArgument);
  EXPECT_TRUE(store_->locks().empty()) << "nothing may be written for bad input";
  EXPECT_FALSE(held_in_database("x"));
  EXPECT_TRUE(a->try_acquire(std::string(255, 'x'))) << "255 bytes is the limit, inclusive";
  EXPECT_TRUE(a->try_acquire("quote ' \" ; DROP TABLE x; -- \xF0\x9F\x94\x92")) << "names are bound, never spliced";
}

TEST_P(Conformance, BadDsnAndMissingSchemaGiveClearErrors) {
  EXPECT_THROW((void)dblock::Store::open("not a uri"), dblock::InvalidArgument);
  EXPECT_THROW((void)dblock::Store::open("redis://localhost"), dblock::InvalidArgument);
  EXPECT_THROW((void)dblock::Store::open(with_params(server_dsn_, "pool=0")), dblock::InvalidArgument);
  EXPECT_THROW((void)dblock::Store::open(with_params(server_dsn_, "prefix=Bad-Prefix")), dblock::InvalidArgument);
  auto fresh = dblock::Store::open(with_params(server_dsn_, "prefix=" + dblock::test::unique_prefix()));
  try {
    dblock::LockManager unusable(fresh);
    FAIL() << "a store without dblock's tables must be refused";
  } catch (const dblock::SchemaError& e) {
    EXPECT_EQ(e.reason(), dblock::SchemaError::Reason::missing);
    EXPECT_NE(std::string(e.what()).find("dblock migrate up"), std::string::npos) << e.what();
  }
}

TEST_P(Conformance, CrossProcessExclusionWithTheCli) {
  char path_template[] = "/tmp/dblock-xproc-XXXXXX";
  int fd = mkstemp(path_template);
  ASSERT_GE(fd, 0);
  close(fd);
  std::string journal = path_template;
  constexpr int kProcesses = 4;
  constexpr int kRounds = 4;
  // Each of kProcesses threads runs its rounds one after the other, as one process would.
  std::vector<std::string> failures(kProcesses);
  {
    std::vector<std::jthread> processes;
    for (int p = 0; p < kProcesses; ++p) {
      processes.emplace_back([&, p] {
        for (int round = 0; round < kRounds; ++round) {
          std::string script = "echo \"begin $$\" >> " + journal + "; sleep 0.01; echo \"end $$\" >> " + journal;
          std::vector<std::string> args{DBLOCK_CLI_PATH, "--dsn", dsn_, "run"};
          if (advisory())
            args.insert(args.end(), {"--mode", "advisory", "--name", "xproc", "--wait", "60s"});
          else
            args.insert(args.end(), {"--name", "xproc", "--ttl", "5s", "--wait", "60s"});
          args.insert(args.end(), {"--", "sh", "-c", script});
          auto outcome = dblock::test::run_command(std::move(args), {}, 90s);
          if (outcome.exit_code != 0) {
            failures[p] = outcome.output;
            return;
          }
        }
      });
    }
  }
  for (auto& failure : failures) EXPECT_TRUE(failure.empty()) << "a dblock run failed: " << failure;
  std::ifstream in(journal);
  std::string kind, pid, open_pid;
  int entries = 0;
  while (in >> kind >> pid) {
    if (kind == "begin") {
      EXPECT_TRUE(open_pid.empty()) << "two processes inside the lock: " << open_pid << " and " << pid;
      open_pid = pid;
      ++entries;
    } else {
      EXPECT_EQ(open_pid, pid);
      open_pid.clear();
    }
  }
  EXPECT_EQ(entries, kProcesses * kRounds);
  std::remove(journal.c_str());
}

TEST_P(AdvisoryConformance, ConnectionDeathReleasesTheLockAndReportsItLost) {
  std::promise<std::pair<std::string, std::int64_t>> lost;
  auto a = manager({.default_ttl = 300ms, .on_lost = [&](std::string_view name, std::int64_t token) {
                      if (name == "lease") lost.set_value({std::string(name), token});
                    }});
  auto b = manager();
  auto old = a->try_acquire("lease");
  ASSERT_TRUE(old);
  auto old_token = old->token();             // drawn now, on the lock's session, while it is held
  auto unasked = a->try_acquire("unasked");  // on the same session; its token is never asked for
  ASSERT_TRUE(unasked);
  EXPECT_FALSE(b->try_acquire("lease"));
  kill_advisory_holder("lease");
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "the watchdog must notice within a check interval";
  EXPECT_EQ(future.get(), std::make_pair(std::string("lease"), old_token));
  EXPECT_TRUE(old->lost());
  EXPECT_EQ(old->token(), old_token) << "a drawn token stays readable";
  EXPECT_THROW((void)unasked->token(), dblock::LockLost) << "no token is drawn for a lock that is gone";
  // Both locks of the broken session are reported, one after the other.
  EXPECT_TRUE(eventually([&] { return a->stats().lost == 2u; })) << a->stats().lost;
  auto fresh = b->try_acquire("lease");
  ASSERT_TRUE(fresh) << "the server released the lock with the connection";
  EXPECT_GT(fresh->token(), old_token);
  EXPECT_THROW(old->release(), dblock::LockLost);
  EXPECT_TRUE(held_in_database("lease")) << "the old holder's release must not touch the new holder's lock";
  auto again = a->try_acquire("other");
  EXPECT_TRUE(again) << "the manager opens a fresh session after the loss";
}

TEST_P(AdvisoryConformance, HeldThroughManyWatchdogChecksWithoutALease) {
  // A 2 s TTL: under TSan beside other suites a 1 s one was lost (no sign of life for a second).
  constexpr auto kTtl = 2s;
  auto a = manager({.default_ttl = kTtl});
  auto b = manager();
  auto held = a->try_acquire("kept");
  ASSERT_TRUE(held);
  auto first_deadline = held->local_deadline();
  EXPECT_LE(first_deadline, std::chrono::steady_clock::now() + kTtl) << "the deadline is the last sign of life + TTL";
  auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return std::chrono::steady_clock::now() - started > 3 * kTtl; }, 3 * kTtl + 2s));
  EXPECT_FALSE(held->lost());
  EXPECT_GT(held->local_deadline(), first_deadline + 1.5 * kTtl) << "each check of the session moves the deadline";
  EXPECT_FALSE(b->try_acquire("kept")) << "still held after three check intervals";
  EXPECT_TRUE(held_in_database("kept"));
}

TEST_P(AdvisoryConformance, WaiterAcquiresWhenTheHolderDies) {
  auto a = manager();
  auto b = manager();
  auto held = a->try_acquire("abandoned");
  ASSERT_TRUE(held);
  auto held_token = held->token();
  auto waiter = std::async(std::launch::async, [&] { return b->acquire("abandoned", 20s).token(); });
  ASSERT_TRUE(eventually([&] { return b->stats().contended >= 1; }));
  kill_advisory_holder("abandoned");  // the holder's process or network dies: no release
  ASSERT_EQ(waiter.wait_for(20s), std::future_status::ready);
  EXPECT_GT(waiter.get(), held_token);
}

// Advisory and GET_LOCK modes draw a lock's token when it is first asked for, on the session that
// holds the lock: a holder that never asks pays no round trip for it. Tokens asked for while held
// still rise in grant order, whoever asks and whoever skips.
TEST_P(AdvisoryConformance, TokensAskedForWhileHeldRiseInGrantOrder) {
  auto a = manager();
  auto b = manager();
  std::int64_t last = 0;
  for (int round = 0; round < 24; ++round) {
    auto& holder = round % 2 == 0 ? a : b;
    auto lock = holder->try_acquire("handed-on");
    ASSERT_TRUE(lock) << "round " << round;
    if (round % 3 != 1) {  // some holders never ask
      auto token = lock->token();
      EXPECT_GT(token, last) << "round " << round;
      EXPECT_EQ(lock->token(), token) << "asked twice, drawn once";
      last = token;
    }
    auto inner = holder->try_acquire("handed-on");  // a re-entry shares the token
    ASSERT_TRUE(inner);
    EXPECT_EQ(inner->token(), lock->token());
    inner->release();
    lock->release();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kPostgresAdvisory, dblock::test::kMysqlTable,
                              dblock::test::kMysqlAdvisory, dblock::test::kSqlite, dblock::test::kPgBouncerTable,
                              dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });
INSTANTIATE_TEST_SUITE_P(Backends, TableConformance,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kSqlite,
                              dblock::test::kSqliteQueued, dblock::test::kPgBouncerTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });
INSTANTIATE_TEST_SUITE_P(Backends, AdvisoryConformance,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresAdvisory,
                                                                  dblock::test::kMysqlAdvisory})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
