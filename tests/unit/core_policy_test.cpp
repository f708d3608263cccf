// The core's safety rules over a scripted backend, without a server: the belief "held" ends at the
// local deadline whatever the I/O does; renewals count only for the (name, owner, token) renewed;
// a re-entry never shortens a lease; statements whose outcome is unknown are never run twice;
// advisory grants a failed statement may have made are given back; each grant ends once in the event hook.

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

#include "base/scope_exit.hpp"
#include "core/combiner.hpp"
#include "core/manager_base.hpp"
#include "core/store_parts.hpp"
#include "support/grant_ends.hpp"
#include "support/scripted_backend.hpp"

namespace {

using namespace dblock_test;

class CorePolicy : public ::testing::Test {
 protected:
  void TearDown() override {
    script_->renewals_gate.open();
    script_->checks_gate.open();
    script_->releases_gate.open();
    script_->advisory_waits_gate.open();
  }
  const std::shared_ptr<dblock::Store>& store() {
    if (!store_)
      store_ = dblock::detail::StoreParts::over(
          std::make_unique<ScriptedBackend>(script_),
          std::make_shared<spdlog::logger>("scripted", std::make_shared<spdlog::sinks::null_sink_mt>()));
    return store_;
  }
  /// A manager that lives until after TearDown, which opens the gates: a manager's end waits for
  /// its watchdog's statement, so one ended with a renewal stalled in a closed gate would wait.
  std::shared_ptr<dblock::LockManager> manager(dblock::ManagerOptions options = {}) {
    return managers_.emplace_back(std::make_shared<dblock::LockManager>(store(), std::move(options)));
  }
  /// One owner for every thread (OwnerScope::manager), 100 ms leases, and renewals that hang: its
  /// guards are reported lost at their deadline, counted in `lost_`.
  std::shared_ptr<dblock::LockManager> stalling_manager() {
    script_->renewals_gate.close();
    return manager({.default_ttl = 100ms,
                    .owner_scope = dblock::OwnerScope::manager,
                    .on_lost = [this](std::string_view, std::int64_t) { ++lost_; }});
  }
  /// A stalled renewal of `name`'s row landed after all: its lease runs on, no guard believing in it.
  void stalled_renewal_lands(const std::string& name) {
    std::lock_guard lock(script_->mutex);
    script_->rows[name].expires = Clock::now() + 30s;
  }
  /// Polls `condition` until it holds or `limit` passes.
  static bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit = 5s) {
    auto until = Clock::now() + limit;
    while (!condition()) {
      if (Clock::now() > until) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

  std::shared_ptr<Script> script_ = std::make_shared<Script>();
  std::atomic<int> lost_{0};  // before the managers, whose on_lost counts here until they end
  std::shared_ptr<dblock::Store> store_;
  std::vector<std::shared_ptr<dblock::LockManager>> managers_;
};

// Moved to tests/testing/core_policy_clock_test.cpp, on dblock::testing's clocks instead of real
// 150-300 ms leases: a stalled renewal reported lost at the deadline, a re-entry with a shorter TTL,
// another owner's grant of the same name.

TEST_F(CorePolicy, TheLastHandleDroppedDuringARenewalEndsTheManagerOnThatThreadNotOnTheWatchdog) {
  auto locks = std::make_unique<dblock::LockManager>(store(), dblock::ManagerOptions{.default_ttl = 300ms});
  script_->renewals_gate.close();
  auto held = locks->try_acquire("held-to-the-end");
  ASSERT_TRUE(held);
  ASSERT_TRUE(eventually([&] { return script_->renewals.load() > 0; })) << "a renewal is under way, stalled";
  // The watchdog holds the manager for its cycle. A manager ended by it would run its destructor
  // on a thread nobody joins, racing the process's exit (seen as a TSan report at exit).
  auto ended = std::async(std::launch::async, [&] {
    held.reset();
    locks.reset();
    return store_.use_count();  // the manager holds the store until it has ended
  });
  (void)ended.wait_for(300ms);  // a bound: the end may return only once the renewal does
  script_->renewals_gate.open();
  EXPECT_EQ(ended.get(), 1) << "the manager had not ended when its last handle was dropped";
}

TEST_F(CorePolicy, LostTurnsTrueAtTheDeadlineEvenBeforeAnyThreadNoticed) {
  auto locks = manager({.default_ttl = 60ms});
  script_->renewals_gate.close();
  auto held = locks->try_acquire("deadline");
  ASSERT_TRUE(held);
  auto deadline = held->local_deadline();
  ASSERT_TRUE(eventually([&] { return Clock::now() >= deadline; }));
  EXPECT_TRUE(held->lost());
}

TEST_F(CorePolicy, AReleaseWhoseReplyWasLostIsNeverRunTwice) {
  auto locks = manager({.default_ttl = 3s});
  auto outer = locks->try_acquire("twice");
  auto inner = locks->try_acquire("twice");
  ASSERT_TRUE(outer && inner);
  script_->release_unknown = Unknown::before_applying;  // still in flight when the core looks
  auto releases = script_->releases.load();
  EXPECT_NO_THROW(inner->release());
  EXPECT_EQ(script_->releases.load(), releases + 1) << "an unknown release must not be sent again";
  script_->apply_release("twice", script_->row("twice")->owner, outer->token());  // the abandoned one lands late
  auto row = script_->row("twice");
  ASSERT_TRUE(row) << "the outer guard's row must survive";
  EXPECT_EQ(row->count, 1);
  EXPECT_FALSE(outer->lost());
}

// A release whose reply was lost reads the row revoked from its grant: the release cannot have
// deleted it and never will (a revoked row's owner is marked), so it is settled as a release that
// found the lock revoked, at once: acknowledged, which frees the name. Sent by its caller, the
// release reports the loss (LockLost); written behind, its caller was told `released` when it was
// queued, which ended the grant, and nothing more is reported.
TEST_F(CorePolicy, AReleaseWhoseLostReplyFindsItsRowRevokedAcknowledgesTheRevocation) {
  script_->max_batch = 8;
  for (bool behind : {false, true}) {
    SCOPED_TRACE(behind ? "written behind" : "sent by its caller");
    std::atomic<int> lost{0};
    auto ends = std::make_shared<GrantEnds>();  // the managers outlive this loop's round
    auto locks = manager({.default_ttl = 30s,
                          .owner_scope = dblock::OwnerScope::manager,
                          .on_lost = [&](std::string_view, std::int64_t) { ++lost; },
                          .on_event = [ends, hook = ends->hook(0)](const dblock::LockEvent& event) { hook(event); },
                          .write_behind_releases = behind});
    auto name = std::string("revoked-meanwhile-") + (behind ? "behind" : "own");
    auto held = locks->try_acquire(name);
    auto other = locks->try_acquire(name + "/other");
    ASSERT_TRUE(held && other);
    // Written behind: another release statement is out, so this one is queued for the writer.
    script_->releases_gate.close();
    auto other_release = std::async(std::launch::async, [&] { other->release(); });
    if (behind) {
      ASSERT_TRUE(eventually([&] { return script_->releases_gate.waiting() > 0; }));
    }
    ASSERT_TRUE(store()->revoke(name));
    {
      std::lock_guard lock(script_->mutex);
      script_->lose_release_reply.insert(name);  // sent (matching nothing: the owner is marked), reply lost
    }
    if (behind) {
      EXPECT_NO_THROW(held->release());
      script_->releases_gate.open();
    } else {
      script_->releases_gate.open();
      EXPECT_THROW(held->release(), dblock::LockLost);
    }
    other_release.get();
    EXPECT_TRUE(eventually([&] { return !script_->row(name); }))
        << "the revoked row waits for its lease although its holder let go";
    // Through the manager: an acquisition waits for a release of its name written behind.
    auto again = locks->try_acquire(name);
    EXPECT_TRUE(again) << "the name is free once the release has settled";
    EXPECT_EQ(lost.load(), 0) << "on_lost is for a lock still held";
    EXPECT_EQ(ends->ends_of(name), 1) << "the grant ended more than once, or never";
    EXPECT_EQ(locks->stats().lost, behind ? 0U : 1U) << "counted as the event hook reported it";
  }
}

TEST_F(CorePolicy, AnAcquireWhoseReplyWasLostIsResolvedByReadingNotByRunningItAgain) {
  auto locks = manager({.default_ttl = 3s});
  script_->acquire_unknown = Unknown::after_applying;
  auto held = locks->try_acquire("landed");
  ASSERT_TRUE(held) << "the read finds the grant that landed";
  EXPECT_EQ(held->count(), 1);
  EXPECT_EQ(script_->acquires.load(), 1);
  EXPECT_EQ(script_->row("landed")->count, 1);

  script_->acquire_unknown = Unknown::before_applying;
  EXPECT_THROW((void)locks->try_acquire("in-flight"), dblock::ConnectionError);
  EXPECT_EQ(script_->acquires.load(), 2) << "not run again while the first may still land";
}

// A guard dropped while its release failed leaves a row of its owner behind, still leased but no
// longer renewed. An acquisition of that name by the same owner whose reply is lost reads that row
// and takes it for its grant: it may believe it only as long as the row's lease lasts, not for its
// own TTL from its sending (CI's nemesis saw a holder believe 396 ms into the next holder's grant).
TEST_F(CorePolicy, AnAcquireWhoseLostReplyIsResolvedToAnEarlierLeaseOfItsOwnerEndsWithThatLease) {
  auto locks = manager({.default_ttl = 30s});
  auto first = locks->try_acquire("left-behind");
  ASSERT_TRUE(first);
  auto owner = script_->row("left-behind")->owner;
  first->release();
  auto row_ends = Clock::now() + 200ms;
  {
    std::lock_guard lock(script_->mutex);
    script_->rows["left-behind"] = {owner, 1, ++script_->next_token, row_ends};
  }
  script_->acquire_unknown = Unknown::before_applying;  // the upsert never lands
  auto held = locks->try_acquire("left-behind");
  ASSERT_TRUE(held) << "the row of its own owner reads as this acquisition's grant";
  EXPECT_LE(held->local_deadline(), row_ends)
      << "believed " << std::chrono::duration_cast<std::chrono::milliseconds>(held->local_deadline() - row_ends).count()
      << " ms past the end of the lease the row showed";
}

// Such a grant's deadline can come long before the deadline timer's next round (a check interval,
// here 10 s): the timer must plan for it, or on_lost (and a leader's on_revoked) would come up to a
// check interval after the row's lease ended and the name could be granted to another.
TEST_F(CorePolicy, AGrantAdoptedWithLittleLeaseLeftIsReportedLostAtThatDeadlineNotAtTheTimersNextRound) {
  std::mutex mutex;
  std::set<std::string> reported;
  auto was_reported = [&](const std::string& name) {
    std::lock_guard lock(mutex);
    return reported.contains(name);
  };
  auto locks = manager({.default_ttl = 30s, .on_lost = [&](std::string_view name, std::int64_t) {
                          std::lock_guard lock(mutex);
                          reported.emplace(name);
                        }});
  // The owner's row of `name` with `lease_left`, read as the grant of an acquisition whose reply is lost.
  auto adopt = [&](const std::string& name, std::chrono::milliseconds lease_left) {
    auto first = locks->try_acquire(name);
    EXPECT_TRUE(first);
    auto owner = script_->row(name)->owner;
    first->release();
    {
      std::lock_guard lock(script_->mutex);
      script_->rows[name] = {owner, 1, ++script_->next_token, Clock::now() + lease_left};
    }
    script_->acquire_unknown = Unknown::before_applying;  // the upsert never lands
    auto held = locks->try_acquire(name);
    EXPECT_TRUE(held) << "the row of its own owner reads as this acquisition's grant";
    return held;
  };
  // The first loss is reported by the deadline timer (at once, or at its next round if it planned
  // before this record existed): once reported, the timer has planned its next round without the next.
  auto first = adopt("left-behind/1", 100ms);
  ASSERT_TRUE(eventually([&] { return was_reported("left-behind/1"); }, 15s));
  auto second = adopt("left-behind/2", 200ms);
  EXPECT_TRUE(eventually([&] { return was_reported("left-behind/2"); }, 3s))
      << "on_lost not called within 3 s of a deadline 200 ms away";
}

// A renewal answered before the row went can be handled after the record's belief was ended (the
// late-grant path gives the row back), with a time read before that end: it must not extend the
// record again, or its guards would believe a row that is gone.
TEST(HeldLockRecord, ABeliefEndedStaysEndedWhateverRenewalIsHandledAfterIt) {
  auto start = dblock::detail::SteadyClock::now();
  dblock::detail::HeldLock held("name", "owner", 7, 30s, start + 10s);
  held.end_belief(start + 2s);
  EXPECT_FALSE(held.extend(start + 20s, start + 1s)) << "a renewal read at 1 s revived a belief ended at 2 s";
  EXPECT_FALSE(held.believed_held(start + 2s));
  EXPECT_LE(held.deadline(), start + 2s);
}

// A grant whose reply came later than its TTL is given back, not handed out. When the give-back
// loses its reply, its decrement may still land: until then the row shows one level of this owner,
// which an acquisition of the same owner whose reply is lost must not take for its grant, or the
// late decrement deletes the row under it (found by the core model: seed 4 of
// OwnerPerManagerCombinedWrittenBehind, a ghost give-back landing after a lost-reply adoption).
TEST_F(CorePolicy, ALostReplyIsNeverResolvedToARowWhoseGiveBackMayStillLand) {
  auto locks = manager({.default_ttl = 30s, .renew_interval = 50ms, .owner_scope = dblock::OwnerScope::manager});
  script_->acquire_delay = 210ms;                       // the reply comes after the lease ended
  script_->release_unknown = Unknown::before_applying;  // the give-back's reply is lost, unapplied
  EXPECT_THROW((void)locks->try_acquire("given-back", {.ttl = 200ms}), dblock::ConnectionError);
  script_->acquire_delay = 0ms;
  auto row = script_->row("given-back");
  ASSERT_TRUE(row) << "the give-back was to stay in flight";
  script_->acquire_unknown = Unknown::before_applying;  // the upsert never lands
  std::optional<dblock::Lock> adopted;
  try {
    adopted = locks->try_acquire("given-back", {.ttl = 30s});
  } catch (const dblock::ConnectionError&) {
  }
  script_->apply_release("given-back", row->owner, row->token);  // the give-back lands now
  EXPECT_FALSE(adopted) << "took token " << row->token << ", whose give-back was still in flight, for its grant";
  EXPECT_FALSE(adopted && !adopted->lost() && !script_->row("given-back"))
      << "believes it holds a name whose row the late give-back deleted";
}

// A guard whose renewal stalled past its deadline is lost and forgotten, but its row can live on (the
// stalled renewal landed after all), and the guard's release will delete it. Another thread of the
// same owner (OwnerScope::manager) whose acquisition loses its reply must not take that row for its
// grant: it would believe it while the lost guard's release deletes it under it.
TEST_F(CorePolicy, ALostReplyIsNeverResolvedToTheRowOfAGuardThatWasLostButNotReleased) {
  auto locks = stalling_manager();
  auto stale = locks->try_acquire("stalled");
  ASSERT_TRUE(stale);
  ASSERT_TRUE(eventually([&] { return lost_.load() > 0; })) << "the guard was not reported lost at its deadline";
  stalled_renewal_lands("stalled");
  script_->acquire_unknown = Unknown::before_applying;
  std::optional<dblock::Lock> adopted;
  try {
    adopted = locks->try_acquire("stalled", {.ttl = 30s});
  } catch (const dblock::ConnectionError&) {
  }
  script_->renewals_gate.open();
  EXPECT_FALSE(adopted) << "took token " << stale->token() << " of a lost guard for its own grant";
  EXPECT_THROW(stale->release(), dblock::LockLost);
  EXPECT_FALSE(adopted && !adopted->lost() && !script_->row("stalled"))
      << "believes it holds a name whose row the lost guard's release deleted";
}

// The same with a re-entry: one thread re-enters the grant of another while that grant is lost
// and forgotten. The database counts two levels, but a second record of the token would not stop
// the lost guard's last release from deleting the row: the re-entry is refused and its level given
// back.
TEST_F(CorePolicy, AReEntryOfAGrantLostMeanwhileIsGivenBackNotRecordedAgain) {
  auto locks = stalling_manager();
  auto outer = locks->try_acquire("re-entered");
  ASSERT_TRUE(outer);
  script_->acquires_gate.close();
  auto inner = std::async(std::launch::async, [&]() -> std::optional<dblock::Lock> {
    try {
      return locks->try_acquire("re-entered", {.ttl = 30s});
    } catch (const dblock::ConnectionError&) {
      return std::nullopt;
    }
  });
  ASSERT_TRUE(eventually([&] { return script_->acquires_gate.waiting() > 0; }));
  ASSERT_TRUE(eventually([&] { return lost_.load() > 0; })) << "the outer guard was not reported lost at its deadline";
  stalled_renewal_lands("re-entered");
  script_->acquires_gate.open();
  auto reentered = inner.get();
  script_->renewals_gate.open();
  EXPECT_THROW(outer->release(), dblock::LockLost);
  if (reentered && !reentered->lost()) {
    auto row = script_->row("re-entered");
    EXPECT_TRUE(row && row->token == reentered->token())
        << "believes it holds a name whose row the lost outer guard's release deleted";
  }
}

// A release whose reply was lost and whose row could not be read either may still land: it is
// remembered as unsettled all the same, so a later acquisition of the owner whose reply is lost
// too does not take the row it may delete for its grant.
TEST_F(CorePolicy, AReleaseLostAndUnreadIsRememberedAsUnsettled) {
  auto locks = manager({.default_ttl = 3s});
  auto held = locks->try_acquire("unread");
  ASSERT_TRUE(held);
  auto token = held->token();
  auto owner = script_->row("unread")->owner;
  script_->release_unknown = Unknown::before_applying;
  script_->failing_reads = 1000;
  EXPECT_THROW(held->release(), dblock::Error);
  script_->failing_reads = 0;
  script_->acquire_unknown = Unknown::before_applying;
  std::optional<dblock::Lock> adopted;
  try {
    adopted = locks->try_acquire("unread");
  } catch (const dblock::ConnectionError&) {
  }
  EXPECT_FALSE(adopted) << "took the row of a release still in flight (token " << token << ") for its grant";
  script_->apply_release_last("unread", owner, token);  // the abandoned DELETE lands
}

TEST_F(CorePolicy, AGrantWhoseReplyCameAfterItsTtlIsGivenBackNotHandedOut) {
  auto locks = manager({.default_ttl = 30ms});
  script_->acquire_delay = 45ms;
  EXPECT_THROW((void)locks->try_acquire("late"), dblock::ConnectionError);
  EXPECT_FALSE(script_->row("late")) << "the late grant was released";
}

TEST_F(CorePolicy, AdvisoryGrantThatItsStatementThenFailedOnIsGivenBack) {
  auto locks = manager({.mode = dblock::LockMode::advisory, .default_ttl = 3s});
  script_->fail_after_grant = dblock::DatabaseError("permission denied for sequence token_seq", "42501");
  EXPECT_THROW((void)locks->try_acquire("half"), dblock::DatabaseError);
  EXPECT_EQ(script_->unlocks.load(), 1);
  {
    std::lock_guard lock(script_->mutex);
    EXPECT_TRUE(script_->server_locks.empty()) << "the server must not keep a lock nobody holds";
  }
  auto other = manager({.mode = dblock::LockMode::advisory});
  std::optional<dblock::Lock> taken;
  std::thread([&] { taken = other->try_acquire("half"); }).join();
  EXPECT_TRUE(taken);
}

TEST_F(CorePolicy, AnAdvisorySessionIsPinnedWithTheSilenceItsLiveOwnerNeverExceeds) {
  // The watchdog checks it every check interval; a TTL more, as its locks are lost locally by then
  // anyway; and room for a late watchdog. The backend ends a cut owner's session past it (MariaDB).
  auto locks = manager({.mode = dblock::LockMode::advisory, .default_ttl = 3s, .renew_interval = 500ms});
  ASSERT_TRUE(locks->try_acquire("pinned"));
  std::lock_guard lock(script_->mutex);
  ASSERT_EQ(script_->pinned_silences.size(), 1U);
  EXPECT_EQ(script_->pinned_silences.front(), 500ms + 3s + 2s);
}

TEST_F(CorePolicy, AdvisoryWaitCancelledByTheServerIsATimeout) {
  auto locks = manager({.mode = dblock::LockMode::advisory, .default_ttl = 3s});
  script_->fail_after_grant = dblock::DatabaseError("canceling statement due to statement timeout", "57014");
  EXPECT_THROW((void)locks->acquire("cancelled", 1h), dblock::Timeout);
  std::lock_guard lock(script_->mutex);
  EXPECT_TRUE(script_->server_locks.empty());
}

TEST_F(CorePolicy, AdvisoryLockWhoseSessionCheckStallsIsLostAtItsDeadline) {
  std::promise<void> reported;
  auto locks = manager({.mode = dblock::LockMode::advisory,
                        .default_ttl = 150ms,
                        .on_lost = [&](std::string_view, std::int64_t) { reported.set_value(); }});
  script_->checks_gate.close();
  auto held = locks->try_acquire("quiet");
  ASSERT_TRUE(held);
  auto deadline = held->local_deadline();
  EXPECT_LT(deadline, Clock::now() + 150ms);
  ASSERT_EQ(reported.get_future().wait_for(2s), std::future_status::ready);
  EXPECT_GE(Clock::now(), deadline);
  EXPECT_TRUE(held->lost());
  script_->checks_gate.open();
  EXPECT_THROW(held->release(), dblock::LockLost);
  // The stalled session is dropped by the next use, and the server lock with it.
  auto again = locks->try_acquire("quiet");
  EXPECT_TRUE(again);
}

// A server-side wait that lasts while another lock on the same session passes its deadline: that
// session is then one the owner's next statement drops, and the server lets go of every lock on
// it, so a grant the wait brings back must never be believed (it is taken again on a new session).
TEST_F(CorePolicy, AnAdvisoryGrantOnASessionThatWentOverdueMeanwhileIsNeverBelieved) {
  std::atomic<int> lost{0};
  auto locks = manager({.mode = dblock::LockMode::advisory,
                        .default_ttl = 150ms,
                        .owner_scope = dblock::OwnerScope::manager,  // one owner, one session
                        .on_lost = [&](std::string_view, std::int64_t) { ++lost; }});
  auto first = locks->try_acquire("first");
  ASSERT_TRUE(first);
  {
    std::lock_guard lock(script_->mutex);
    script_->server_locks["second"] = -1;  // another client's session holds it
  }
  script_->advisory_waits_gate.close();
  auto second = std::async(std::launch::async, [&] { return locks->acquire("second", 5s); });
  ASSERT_TRUE(eventually([&] { return script_->advisory_waits_gate.waiting() > 0; }));
  // The busy session is not checked: the first lock passes its deadline while the wait lasts.
  ASSERT_TRUE(eventually([&] { return lost.load() > 0; })) << "the first lock was not reported lost";
  {
    std::lock_guard lock(script_->mutex);
    script_->server_locks.erase("second");  // the other client lets go: the wait is granted
  }
  script_->advisory_waits_gate.open();
  auto granted = second.get();
  auto third = locks->try_acquire("third");  // the owner's next statement drops an overdue session
  ASSERT_TRUE(third);
  std::lock_guard lock(script_->mutex);
  EXPECT_TRUE(granted.lost() || script_->server_locks.contains("second"))
      << "believes a lock the server let go of with its dropped session";
}

/// An on_lost report that stops in the callback until the test lets it go: whichever thread runs
/// it (the watchdog, the deadline timer) waits there.
struct HeldReport {
  std::promise<void> entered, let_go;
  std::shared_future<void> released = let_go.get_future().share();
  std::atomic<int> reports{0};
  void hold() {
    entered.set_value();
    released.wait();
  }
};

// A connection found broken is taken out of its owner's records, then its locks are reported lost
// one by one (each report runs on_lost). A lock not reported yet must not draw its fencing token on
// the connection the owner opened meanwhile: that token would fence for a lock it no longer holds.
TEST_F(CorePolicy, AnAdvisoryLockWhoseConnectionBrokeDrawsNoTokenOnTheOwnersNextConnection) {
  script_->lazy_tokens = true;
  auto held_report = std::make_shared<HeldReport>();  // shared: the watchdog reports on after the test
  dblock::detail::ScopeExit release_reports([&] { held_report->let_go.set_value(); });
  auto locks = manager({.mode = dblock::LockMode::advisory,
                        .default_ttl = 6s,  // the test ends long before any deadline
                        .on_lost = [held_report](std::string_view, std::int64_t) {
                          if (held_report->reports++ == 0) held_report->hold();
                        }});
  auto first = locks->try_acquire("first");
  auto second = locks->try_acquire("second");  // re-uses the owner's connection (session 1)
  ASSERT_TRUE(first && second);
  {
    std::lock_guard lock(script_->mutex);
    script_->broken_sessions.insert(1);
  }
  ASSERT_EQ(held_report->entered.get_future().wait_for(5s), std::future_status::ready);
  auto& unreported = first->lost() ? *second : *first;
  ASSERT_FALSE(unreported.lost()) << "both were reported: the watchdog did not stop in the first report";
  auto third = locks->try_acquire("third");  // on the owner's next connection
  ASSERT_TRUE(third);
  EXPECT_THROW((void)unreported.token(), dblock::LockLost);
}

// The deadline timer reports a lock lost when it gets to it: while it runs another lock's on_lost, a
// lock past its local deadline is still in its owner's records, and must not be re-entered.
TEST_F(CorePolicy, AnAdvisoryLockPastItsDeadlineIsNotReEnteredBeforeTheTimerReportsIt) {
  auto held_report = std::make_shared<HeldReport>();
  dblock::detail::ScopeExit release_reports([&] { held_report->let_go.set_value(); });
  {
    std::lock_guard lock(script_->mutex);
    script_->stalled_sessions = {1};  // only the first connection's checks hang
  }
  script_->checks_gate.close();
  auto locks = manager({.mode = dblock::LockMode::advisory,
                        .default_ttl = 300ms,
                        .on_lost = [held_report](std::string_view name, std::int64_t) {
                          if (name == "a") held_report->hold();  // holds the deadline timer
                        }});
  std::optional<dblock::Lock> a;
  std::thread([&] { a = locks->try_acquire("a"); }).join();  // an owner of its own: connection 1
  auto b = locks->try_acquire("b");                          // connection 2
  ASSERT_TRUE(a && b);
  // The watchdog hangs in connection 1's check; "a" passes its deadline, and its report holds the timer.
  ASSERT_EQ(held_report->entered.get_future().wait_for(5s), std::future_status::ready);
  ASSERT_TRUE(eventually([&] { return Clock::now() >= b->local_deadline(); }));
  EXPECT_THROW((void)locks->try_acquire("b"), dblock::ConnectionError) << "re-entered a lock past its deadline";
}

TEST_F(CorePolicy, ReleasingAnInnerLevelOfALostAdvisoryLockThrowsLockLost) {
  auto reported = std::make_shared<std::promise<void>>();
  auto locks = manager({.mode = dblock::LockMode::advisory,
                        .default_ttl = 6s,
                        .on_lost = [reported](std::string_view, std::int64_t) { reported->set_value(); }});
  auto outer = locks->try_acquire("nested");
  auto inner = locks->try_acquire("nested");
  ASSERT_TRUE(outer && inner);
  {
    std::lock_guard lock(script_->mutex);
    script_->broken_sessions.insert(1);
  }
  ASSERT_EQ(reported->get_future().wait_for(5s), std::future_status::ready);
  EXPECT_THROW(inner->release(), dblock::LockLost);
  EXPECT_THROW(outer->release(), dblock::LockLost);
}

TEST_F(CorePolicy, AdvisoryLockGrantedAfterAWaitLongerThanItsTtlIsNotBornLost) {
  auto locks = manager({.mode = dblock::LockMode::advisory, .default_ttl = 60ms});
  {
    std::lock_guard lock(script_->mutex);
    script_->server_locks["queued"] = -1;  // held by a session of another process...
  }
  script_->server_wait = 100ms;
  std::jthread other_process([&] {
    std::this_thread::sleep_for(50ms);  // ...which lets go while we wait (when does not matter)
    std::lock_guard lock(script_->mutex);
    script_->server_locks.erase("queued");
  });
  auto held = locks->acquire("queued", 5s);
  EXPECT_FALSE(held.lost()) << "its deadline counts from the grant, not from the start of the wait";
  EXPECT_GT(held.local_deadline(), Clock::now());
}

TEST_F(CorePolicy, OwnerTagsWithControlCharactersOrTooLongAreRefused) {
  EXPECT_THROW(manager({.owner_tag = std::string("pod\0a", 5)}), dblock::InvalidArgument);
  EXPECT_THROW(manager({.owner_tag = "pod\nforged"}), dblock::InvalidArgument);
  EXPECT_THROW(manager({.owner_tag = std::string(65, 'x')}), dblock::InvalidArgument);
  EXPECT_THROW(manager({.owner_tag = "\xff"}), dblock::InvalidArgument);
  EXPECT_NO_THROW(manager({.owner_tag = "pod-7/zone-b"}));
}

/// Four callers on four threads whose acquisitions go out in one combined statement: "refused"
/// (another owner's live row), "reentered" (the caller's own grant), "expired" (another owner's
/// row past its lease) and "fresh". `lose`: what becomes of the combined statement's reply.
struct BatchOutcomes {
  std::optional<dblock::Lock> refused, reentered, expired, fresh;
  bool refused_threw = false, reentered_threw = false, expired_threw = false, fresh_threw = false;
  std::int64_t reentered_first_token = 0, expired_old_token = 0;
  int batches = 0;
  std::uint64_t combined = 0;
};

BatchOutcomes acquire_in_one_batch(const std::shared_ptr<Script>& script, Unknown lose) {
  script->max_batch = 8;
  auto store = dblock::detail::StoreParts::over(
      std::make_unique<ScriptedBackend>(script),
      std::make_shared<spdlog::logger>("scripted", std::make_shared<spdlog::sinks::null_sink_mt>()));
  auto locks = std::make_shared<dblock::LockManager>(store, dblock::ManagerOptions{.default_ttl = 1min});
  BatchOutcomes out;
  {
    std::lock_guard lock(script->mutex);
    script->rows["refused"] = Script::Row{"someone-else", 1, ++script->next_token, Clock::now() + 1min};
    out.expired_old_token = ++script->next_token;
    script->rows["expired"] = Script::Row{"someone-else", 1, out.expired_old_token, Clock::now() - 1s};
  }
  std::atomic<int> parked{0};
  auto run = [&](const std::string& name, std::optional<dblock::Lock>& got, bool& threw, std::future<void> go) {
    dblock::detail::ParkHooks hooks{[&] { ++parked; }, {}};
    dblock::detail::park_hooks = &hooks;
    go.wait();
    try {
      got = locks->try_acquire(name);
    } catch (const dblock::ConnectionError&) {
      threw = true;
    }
  };
  // The re-entering caller holds its first grant on its own thread (owners are per thread).
  std::promise<void> held, go_reenter;
  std::promise<void> go_refused, go_expired, go_fresh;
  std::optional<dblock::Lock> first;
  std::thread reenterer([&, go = go_reenter.get_future()]() mutable {
    first = locks->try_acquire("reentered");
    out.reentered_first_token = first ? first->token() : -1;
    held.set_value();
    run("reentered", out.reentered, out.reentered_threw, std::move(go));
    first.reset();
  });
  held.get_future().wait();
  script->acquires_gate.close();
  auto blocker = std::async(std::launch::async, [&] { return locks->try_acquire("blocker"); });
  // Once the blocker's statement is out, the next ones queue behind it.
  for (auto until = Clock::now() + 5s; script->acquires.load() < 2 && Clock::now() < until;)
    std::this_thread::sleep_for(1ms);
  std::thread a(
      [&, go = go_refused.get_future()]() mutable { run("refused", out.refused, out.refused_threw, std::move(go)); });
  std::thread b(
      [&, go = go_expired.get_future()]() mutable { run("expired", out.expired, out.expired_threw, std::move(go)); });
  std::thread c([&, go = go_fresh.get_future()]() mutable { run("fresh", out.fresh, out.fresh_threw, std::move(go)); });
  for (auto* go : {&go_reenter, &go_refused, &go_expired, &go_fresh}) go->set_value();
  for (auto until = Clock::now() + 5s; parked.load() < 4 && Clock::now() < until;) std::this_thread::sleep_for(1ms);
  script->batch_unknown = lose;
  script->acquires_gate.open();
  auto blocked = blocker.get();
  a.join();
  b.join();
  c.join();
  reenterer.join();
  out.batches = script->batches.load();
  out.combined = locks->stats().combined;
  return out;
}

TEST_F(CorePolicy, ACombinedStatementGivesEachCallerExactlyItsOwnOutcome) {
  auto out = acquire_in_one_batch(script_, Unknown::no);
  EXPECT_EQ(out.batches, 1);
  EXPECT_EQ(out.combined, 4U);
  EXPECT_FALSE(out.refused.has_value());
  ASSERT_TRUE(out.reentered.has_value());
  EXPECT_EQ(out.reentered->token(), out.reentered_first_token);
  ASSERT_TRUE(out.expired.has_value());
  EXPECT_GT(out.expired->token(), out.expired_old_token);
  ASSERT_TRUE(out.fresh.has_value());
  EXPECT_EQ(script_->row("refused")->owner, "someone-else");
}

TEST_F(CorePolicy, ACombinedStatementWhoseReplyIsLostIsResolvedPerCallerByReadingItsRow) {
  auto landed = acquire_in_one_batch(script_, Unknown::after_applying);
  EXPECT_EQ(landed.batches, 1);
  EXPECT_TRUE(landed.refused_threw);  // the row is another owner's: not a grant, and it cannot tell more
  ASSERT_TRUE(landed.reentered.has_value());
  EXPECT_EQ(landed.reentered->token(), landed.reentered_first_token);
  ASSERT_TRUE(landed.expired.has_value());
  EXPECT_GT(landed.expired->token(), landed.expired_old_token);
  EXPECT_TRUE(landed.fresh.has_value());

  script_ = std::make_shared<Script>();
  auto lost = acquire_in_one_batch(script_, Unknown::before_applying);
  EXPECT_EQ(lost.batches, 1);
  EXPECT_TRUE(lost.refused_threw && lost.reentered_threw && lost.expired_threw && lost.fresh_threw);
  EXPECT_FALSE(script_->row("fresh").has_value());
  EXPECT_EQ(script_->row("expired")->token, lost.expired_old_token);
}

TEST_F(CorePolicy, AReleaseWrittenBehindReturnsAtOnceAndAnAcquisitionOfItsNameThroughTheManagerWaitsForIt) {
  script_->max_batch = 8;
  auto locks = manager({.default_ttl = 1min, .write_behind_releases = true});
  // Owners are per thread: each guard is taken and released on a thread of its own.
  auto holder = [&](const std::string& name) {
    std::optional<dblock::Lock> lock;
    std::thread([&] { lock = locks->try_acquire(name); }).join();
    return lock;
  };
  auto first = holder("first");
  auto second = holder("second");
  ASSERT_TRUE(first && second);
  auto second_token = second->token();
  script_->releases_gate.close();
  auto first_release = std::async(std::launch::async, [&] { first->release(); });
  ASSERT_TRUE(eventually([&] { return script_->releases_gate.waiting() > 0; }));
  // A release statement is out: the next release is queued and its caller goes on.
  auto second_release = std::async(std::launch::async, [&] { second->release(); });
  ASSERT_EQ(second_release.wait_for(5s), std::future_status::ready)
      << "a release behind another waited for its statement";
  second_release.get();
  EXPECT_TRUE(script_->row("second").has_value()) << "the release written behind was sent before a statement was free";
  EXPECT_EQ(locks->stats().written_behind, 1U);
  // Another owner of this manager asks for the name: it waits for the release, then gets the name.
  std::atomic<bool> parked{false};
  auto taker = std::async(std::launch::async, [&] {
    dblock::detail::ParkHooks hooks{[&] { parked = true; }, {}};
    dblock::detail::park_hooks = &hooks;
    return locks->try_acquire("second");
  });
  ASSERT_TRUE(eventually([&] { return parked.load(); })) << "the acquisition did not wait for the pending release";
  script_->releases_gate.open();
  first_release.get();
  auto taken = taker.get();
  ASSERT_TRUE(taken.has_value()) << "refused: it did not wait for the release written behind";
  EXPECT_GT(taken->token(), second_token);
  EXPECT_FALSE(script_->row("first").has_value());
}

/// Guards of `names`, each taken on a thread of its own (owners are per thread).
std::vector<dblock::Lock> hold_each(dblock::LockManager& locks, const std::vector<std::string>& names) {
  std::vector<dblock::Lock> held;
  for (const auto& name : names) {
    std::optional<dblock::Lock> lock;
    std::thread([&] { lock = locks.try_acquire(name); }).join();
    if (lock) held.push_back(std::move(*lock));
  }
  return held;
}

TEST_F(CorePolicy, ReleasesWrittenBehindWhoseBatchLostItsReplyAreReadNeverSentAgainNorReportedLost) {
  script_->max_batch = 8;
  std::atomic<int> lost_reports{0};
  auto locks = manager({.default_ttl = 1min,
                        .on_lost = [&](std::string_view, std::int64_t) { ++lost_reports; },
                        .write_behind_releases = true});
  auto held = hold_each(*locks, {"a", "b", "c"});
  ASSERT_EQ(held.size(), 3U);
  script_->releases_gate.close();
  auto first = std::async(std::launch::async, [&] { held[0].release(); });
  ASSERT_TRUE(eventually([&] { return script_->releases_gate.waiting() > 0; }));
  held[1].release();  // both written behind: one batch once the gate opens
  held[2].release();
  {
    std::lock_guard lock(script_->mutex);
    script_->lose_release_reply = {"b", "c"};
  }
  script_->releases_gate.open();
  first.get();
  // An acquisition through the manager waits for the writer to settle the name.
  std::optional<dblock::Lock> b_again, c_again;
  std::thread([&] {
    b_again = locks->try_acquire("b");
    c_again = locks->try_acquire("c");
  }).join();
  ASSERT_TRUE(b_again && c_again) << "a name whose release landed stayed taken";
  {
    std::lock_guard lock(script_->mutex);
    EXPECT_TRUE(script_->lose_release_reply.empty()) << "the writer never sent b or c";
    EXPECT_EQ(script_->releases_of["b"], 1) << "a release whose reply was lost was sent again";
    EXPECT_EQ(script_->releases_of["c"], 1) << "a release whose reply was lost was sent again";
  }
  EXPECT_EQ(lost_reports.load(), 0) << "a release that landed was reported lost";
  EXPECT_EQ(locks->stats().lost, 0U);
}

// The reported defect: a release written behind reported `released` when it returned, and its
// statement, sent later by the writer, found the row revoked (or deleted by force) and reported the
// grant `lost` as well: dblock_held_locks fell to -1 for good and the hold histogram counted the
// grant twice. Its caller was told `released`, and the lock is held by nobody of this manager either
// way: the writer acknowledges the revocation (the name is free at once) and only logs what it found,
// so the grant ends once, and no user code (on_lost) runs for it, on the writer's thread or any other.
TEST_F(CorePolicy, AReleaseWrittenBehindThatFindsItsRowRevokedOrDeletedEndsItsGrantOnce) {
  script_->max_batch = 8;
  GrantEnds ends;  // outlives the manager, whose last events come as it ends
  std::atomic<int> lost{0};
  auto locks = std::make_shared<dblock::LockManager>(
      store(), dblock::ManagerOptions{.default_ttl = 1min,
                                      .on_lost = [&](std::string_view, std::int64_t) { ++lost; },
                                      .on_event = ends.hook(0),
                                      .write_behind_releases = true});
  auto held = hold_each(*locks, {"a", "deleted", "revoked"});
  ASSERT_EQ(held.size(), 3U);
  ASSERT_TRUE(store()->revoke("revoked"));
  ASSERT_TRUE(store()->force_release("deleted"));
  script_->releases_gate.close();
  auto first = std::async(std::launch::async, [&] { held[0].release(); });
  ASSERT_TRUE(eventually([&] { return script_->releases_gate.waiting() > 0; }));
  EXPECT_NO_THROW(held[1].release());  // written behind: what the manager knows says it is held
  EXPECT_NO_THROW(held[2].release());
  EXPECT_EQ(locks->stats().written_behind, 2U);
  EXPECT_EQ(ends.ends_of("deleted"), 1) << "a release written behind reports its end when it returns";
  EXPECT_EQ(ends.ends_of("revoked"), 1) << "a release written behind reports its end when it returns";
  script_->releases_gate.open();
  first.get();
  // Acquisitions through the manager wait for the writer to settle their names; the revoked one is
  // free at once, its holder having let go.
  auto again = hold_each(*locks, {"deleted", "revoked"});
  EXPECT_EQ(again.size(), 2U) << "the writer's release did not settle the names";
  again.clear();
  auto lost_counted = locks->stats().lost;
  locks.reset();  // its end joins the deadline timer: no report about these grants can come later
  EXPECT_EQ(ends.unbalanced(), "");
  EXPECT_EQ(ends.held(), 0) << "dblock_held_locks would not be back at 0";
  EXPECT_EQ(lost.load(), 0) << "on_lost ran for a lock its holder had released";
  EXPECT_EQ(lost_counted, 0U) << "stats().lost counted a loss the event hook never reported";
}

// A release whose statement failed (here: its reply was lost and the read that would resolve it
// failed too) let go all the same: nothing renews the row, which lapses with its lease. The grant
// ends then, reported released, and the error still reaches the caller.
TEST_F(CorePolicy, AReleaseWhoseStatementFailedStillEndsItsGrantOnce) {
  GrantEnds ends;
  auto locks = std::make_shared<dblock::LockManager>(
      store(), dblock::ManagerOptions{.default_ttl = 3s, .on_event = ends.hook(0)});
  auto held = locks->try_acquire("failing");
  ASSERT_TRUE(held);
  script_->release_unknown = Unknown::before_applying;
  script_->failing_reads = 1;
  EXPECT_THROW(held->release(), dblock::ConnectionError);
  EXPECT_EQ(ends.held(), 0) << "the grant never ended: dblock_held_locks would stay at 1";
  locks.reset();
  EXPECT_EQ(ends.unbalanced(), "");
}

// The last guard of a membership ends its grant even when the membership's row counts a level more
// (one whose reply was lost and that landed after all): nothing renews that level, which lapses with
// the lease, so the released event leaves no level held, as in advisory mode.
TEST_F(CorePolicy, TheLastReleaseOfAMembershipEndsItsGrantWhateverItsRowCounts) {
  GrantEnds ends;
  auto locks = std::make_shared<dblock::LockManager>(
      store(), dblock::ManagerOptions{.default_ttl = 3s, .on_event = ends.hook(0)});
  auto held = locks->try_acquire("permits", {.permits = 2});
  ASSERT_TRUE(held);
  {
    std::lock_guard lock(script_->mutex);
    ASSERT_EQ(script_->members.size(), 1U);
    script_->members.begin()->second.count += 1;  // a level nobody holds
  }
  EXPECT_NO_THROW(held->release());
  EXPECT_EQ(ends.held(), 0) << "the grant never ended: dblock_held_locks would stay at 1";
  locks.reset();
  EXPECT_EQ(ends.unbalanced(), "");
}

}  // namespace

namespace {

/// The waiter rows of `name` in the script, and the seq of its newest.
std::pair<std::size_t, std::int64_t> waiter_rows(Script& script, const std::string& name) {
  std::lock_guard lock(script.mutex);
  auto queue = script.waiters.find(name);
  if (queue == script.waiters.end() || queue->second.empty()) return {0, 0};
  return {queue->second.size(), queue->second.rbegin()->first};
}

// A fair-queue waiter that hears the release that granted it (the release names the waiter's row
// and the grant's token) takes the grant without a read, with a lease no longer than the row's; a
// notice of a grant to an earlier wait of the same owner (its seq) is never taken for this one.
TEST_F(CorePolicy, AQueuedWaiterTakesTheGrantItHearsAndNeverOneOfAnEarlierWait) {
  script_->notices_on = true;
  auto fair = manager({.default_ttl = 60s, .fair_queue = true});
  auto other = manager({.default_ttl = 60s});
  const std::string name = "heard";
  auto holder = other->try_acquire(name);
  ASSERT_TRUE(holder);
  std::mutex mutex;
  struct Granted {
    std::int64_t token = 0;
    std::chrono::steady_clock::time_point believed_until, row_expires;
  };
  std::vector<Granted> granted;
  std::atomic<bool> again{false};
  std::jthread waiter([&] {
    for (int round = 0; round < 2; ++round) {
      if (round == 1 && !eventually([&] { return again.load(); }, 10s)) return;
      auto lock = fair->acquire(name, 10s);
      auto row = script_->row(name);
      std::lock_guard guard(mutex);
      granted.push_back({lock.token(), lock.local_deadline(), row ? row->expires : Clock::time_point{}});
    }  // each released at once (nobody waits: the name is freed)
  });
  ASSERT_TRUE(eventually([&] { return waiter_rows(*script_, name).first == 1; }));
  auto first_seq = waiter_rows(*script_, name).second;
  holder->release();  // a plain release: the waiter's turn takes the name, read by its look
  ASSERT_TRUE(eventually([&] {
    std::lock_guard guard(mutex);
    return granted.size() == 1;
  }));
  // Second round: the fair manager's own holder hands the name to the waiter.
  auto fair_holder_thread_result = std::optional<dblock::Lock>();
  std::jthread fair_holder([&] { fair_holder_thread_result = fair->try_acquire(name); });
  fair_holder.join();
  ASSERT_TRUE(fair_holder_thread_result);
  again = true;
  ASSERT_TRUE(eventually([&] { return waiter_rows(*script_, name).first == 1; }));
  auto seq = waiter_rows(*script_, name).second;
  ASSERT_GT(seq, first_seq);
  // A notice of a grant to the waiter's earlier row (a late one) is heard first: it is not this
  // wait's, so the waiter looks (and the look fails once: the sign that it was heard and not taken).
  std::string waiter_owner;
  auto waiter_lease = [&] {
    std::lock_guard lock(script_->mutex);
    return script_->waiters[name].rbegin()->second.expires;
  };
  {
    std::lock_guard lock(script_->mutex);
    waiter_owner = script_->waiters[name].rbegin()->second.owner;
  }
  auto queued_lease = waiter_lease();
  script_->failing_reads = 1;
  {
    std::lock_guard lock(script_->notice_mutex);
    script_->notices.push_back({name, dblock::detail::HandedGrant{waiter_owner, first_seq, granted.front().token}});
  }
  script_->notice_changed.notify_all();
  ASSERT_TRUE(eventually([&] { return script_->failed_reads.load() == 1; }, 10s))
      << "the waiter never looked after the late notice";
  {
    std::lock_guard guard(mutex);
    ASSERT_EQ(granted.size(), 1U) << "the waiter took the grant of its earlier wait";
  }
  // After a failed look a waiter takes a turn (renewing its waiter lease) before it waits again.
  ASSERT_TRUE(eventually([&] { return waiter_lease() > queued_lease; }, 10s));
  auto unread_before = fair->stats().grants_unread;
  auto holder_token = fair_holder_thread_result->token();
  fair_holder_thread_result->release();  // hands the name to the waiter, and tells it so
  waiter.join();
  ASSERT_EQ(granted.size(), 2U);
  EXPECT_FALSE(script_->row(name)) << "the waiter's release freed the name";
  EXPECT_GT(granted[1].token, holder_token);
  EXPECT_LE(granted[1].believed_until, granted[1].row_expires) << "the waiter believes longer than its row lives";
  EXPECT_EQ(fair->stats().grants_unread, unread_before + 1) << "the hand-off's grant was taken as heard";
}

}  // namespace
