// Groups of holders in table mode: counting semaphores (LockOptions::permits) and read-write locks
// (LockOptions::shared, with the plain exclusive lock as the writer), on every table backend.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "core/store_parts.hpp"
#include "support/admin.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using dblock::test::eventually;

namespace {

class Groups : public dblock::test::InstalledCaseTest {
 protected:
  std::vector<dblock::LockInfo> holders_of(const std::string& name) {
    std::vector<dblock::LockInfo> rows;
    for (auto& row : store_->locks())
      if (row.name == name) rows.push_back(row);
    return rows;
  }
};

constexpr dblock::LockOptions permits(std::int64_t n) { return {.permits = n}; }
constexpr dblock::LockOptions kShared{.shared = true};

TEST_P(Groups, PermitsAdmitUpToTheirCapacityEachWithItsOwnRisingToken) {
  auto a = manager(), b = manager(), c = manager(), plain = manager();
  auto first = a->try_acquire("pool", permits(2));
  ASSERT_TRUE(first);
  auto second = b->try_acquire("pool", permits(2));
  ASSERT_TRUE(second);
  EXPECT_GT(second->token(), first->token());
  EXPECT_FALSE(c->try_acquire("pool", permits(2))) << "a third holder of two permits";
  EXPECT_FALSE(plain->try_acquire("pool")) << "an exclusive lock beside permit holders";
  EXPECT_FALSE(plain->try_acquire("pool", kShared)) << "a reader beside permit holders";
  auto rows = holders_of("pool");
  ASSERT_EQ(rows.size(), 2u) << "one row per holder";
  for (auto& row : rows) EXPECT_EQ(row.kind, dblock::HolderKind::permit);
  auto before = second->token();
  first->release();
  auto third = c->try_acquire("pool", permits(2));
  ASSERT_TRUE(third) << "a permit given back is taken";
  EXPECT_GT(third->token(), before);
  second->release();
  third->release();
  EXPECT_TRUE(holders_of("pool").empty());
  auto exclusive = plain->try_acquire("pool");
  ASSERT_TRUE(exclusive) << "the name is free once every permit is back";
  EXPECT_GT(exclusive->token(), before);
  EXPECT_FALSE(a->try_acquire("pool", permits(5))) << "permit holders wait for an exclusive holder";
}

TEST_P(Groups, APermitIsReentrantPerOwnerAndCountsOnce) {
  auto a = manager(), b = manager();
  auto outer = a->try_acquire("re", permits(1));
  ASSERT_TRUE(outer);
  auto inner = a->try_acquire("re", permits(1));
  ASSERT_TRUE(inner) << "the owner re-enters its own permit";
  EXPECT_EQ(inner->count(), 2);
  EXPECT_EQ(inner->token(), outer->token());
  EXPECT_FALSE(b->try_acquire("re", permits(1)));
  inner->release();
  EXPECT_FALSE(b->try_acquire("re", permits(1))) << "still held at depth 1";
  outer->release();
  EXPECT_TRUE(b->try_acquire("re", permits(1)));
}

TEST_P(Groups, CallersWithAnotherCapacityAreEachJudgedByTheirOwn) {
  auto a = manager(), b = manager(), c = manager();
  auto one = a->try_acquire("cap", permits(1));
  ASSERT_TRUE(one);
  EXPECT_FALSE(b->try_acquire("cap", permits(1))) << "one other holder: full for a capacity of 1";
  auto two = b->try_acquire("cap", permits(2));
  EXPECT_TRUE(two) << "one other holder: room for a capacity of 2";
  EXPECT_FALSE(c->try_acquire("cap", permits(2)));
}

TEST_P(Groups, NeverMoreThanTheirCapacityHoldPermitsAtOnce) {
  constexpr int kThreads = 6, kRounds = 12;
  std::atomic<int> inside{0}, most{0}, errors{0};
  std::mutex tokens_mutex;
  std::vector<std::int64_t> tokens;
  auto worker = [&] {
    auto own = manager({.default_ttl = 10s});
    for (int round = 0; round < kRounds; ++round) {
      try {
        auto permit = own->acquire("hot-pool", 30s, permits(2));
        int now = inside.fetch_add(1) + 1;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        {
          std::lock_guard lock(tokens_mutex);
          tokens.push_back(permit.token());
        }
        inside.fetch_sub(1);
        permit.release();
      } catch (const dblock::Error&) {
        errors.fetch_add(1);
      }
    }
  };
  std::vector<std::future<void>> workers;
  for (int i = 0; i < kThreads; ++i) workers.push_back(std::async(std::launch::async, worker));
  for (auto& w : workers) ASSERT_EQ(w.wait_for(120s), std::future_status::ready);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(most.load(), 2) << "more holders than permits";
  ASSERT_EQ(tokens.size(), static_cast<std::size_t>(kThreads * kRounds));
  std::set<std::int64_t> distinct(tokens.begin(), tokens.end());
  EXPECT_EQ(distinct.size(), tokens.size()) << "every permit has a token of its own";
}

TEST_P(Groups, ReadersShareAndAWaitingWriterIsNotStarvedByLaterReaders) {
  auto r1 = manager(), r2 = manager(), r3 = manager(), writer = manager();
  auto first = r1->try_acquire("rw", kShared);
  auto second = r2->try_acquire("rw", kShared);
  ASSERT_TRUE(first && second) << "readers share";
  EXPECT_GT(second->token(), first->token()) << "every reader has a token of its own, rising in join order";
  EXPECT_FALSE(writer->try_acquire("rw")) << "no writer beside readers";
  auto waiting = std::async(std::launch::async, [&] { return writer->acquire("rw", 30s); });
  ASSERT_TRUE(eventually([&] { return writer->stats().contended >= 2; })) << "the writer waits";
  // From the writer's first wait on, a new reader queues behind it.
  ASSERT_TRUE(eventually([&] { return !r3->try_acquire("rw", kShared).has_value(); }));
  auto reader_token = second->token();
  first->release();
  second->release();
  ASSERT_EQ(waiting.wait_for(20s), std::future_status::ready);
  auto written = waiting.get();
  EXPECT_GT(written.token(), reader_token) << "an exclusive grant after readers has a larger token";
  EXPECT_FALSE(r3->try_acquire("rw", kShared)) << "no reader beside a writer";
  auto writer_token = written.token();
  written.release();
  auto later = r3->try_acquire("rw", kShared);
  ASSERT_TRUE(later) << "the writer's mark went with its grant";
  EXPECT_GT(later->token(), writer_token);
  EXPECT_EQ(holders_of("rw").at(0).kind, dblock::HolderKind::shared);
}

TEST_P(Groups, AMemberWhoseGroupIsBrokenIsReportedLost) {
  std::promise<std::int64_t> lost;
  auto a =
      manager({.default_ttl = 300ms, .on_lost = [&](std::string_view, std::int64_t token) { lost.set_value(token); }});
  auto permit = a->try_acquire("broken", permits(3));
  ASSERT_TRUE(permit);
  EXPECT_TRUE(store_->force_release("broken"));
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "the watchdog must notice within a cycle";
  EXPECT_EQ(future.get(), permit->token());
  EXPECT_THROW(permit->release(), dblock::LockLost);
}

TEST_P(Groups, MembersAreRenewedPastSeveralTtls) {
  // 3 s: with 300 ms through PgBouncer under a sanitizer, and with 1 s through PgBouncer beside the
  // dev suite's background builds, one late renewal lost the lease. A renewal runs every third of it.
  auto a = manager({.default_ttl = 3s}), b = manager();
  auto reader = a->try_acquire("renewed", kShared);
  ASSERT_TRUE(reader);
  auto until = std::chrono::steady_clock::now() + 9s;
  EXPECT_FALSE(eventually([&] { return std::chrono::steady_clock::now() >= until && reader->lost(); }, 9500ms));
  EXPECT_FALSE(reader->lost());
  EXPECT_FALSE(b->try_acquire("renewed")) << "still held after three TTLs";
}

TEST_P(Groups, AWaitingPermitIsGrantedPromptlyWhenOneIsGivenBack) {
  auto a = manager({.default_ttl = 60s}), b = manager();
  auto held = a->try_acquire("handoff", permits(1));
  ASSERT_TRUE(held);
  auto waiter = std::async(std::launch::async, [&] {
    auto permit = b->acquire("handoff", 30s, permits(1));
    return std::chrono::steady_clock::now();
  });
  ASSERT_TRUE(eventually([&] { return b->stats().contended >= 2; }));
  auto released_at = std::chrono::steady_clock::now();
  held->release();
  ASSERT_EQ(waiter.wait_for(20s), std::future_status::ready);
  EXPECT_LT(waiter.get() - released_at, 5s) << "woken by the release or a short poll, not the 60 s lease";
}

TEST_P(Groups, TheReaperDeletesLapsedMembersAndLeavesLiveOnes) {
  auto& backend = dblock::detail::StoreParts::backend(*store_).groups().get();
  // The live member first: a join sweeps lapsed members out of a group, so an abandoned 20 ms lease
  // taken first could lapse and be swept by this join on a loaded machine, leaving the reaper nothing.
  auto a = manager();
  auto live = a->try_acquire("reaped", permits(2));
  ASSERT_TRUE(live);
  ASSERT_TRUE(backend.try_acquire_member("reaped", "abandoner", dblock::HolderKind::permit, 2, 20ms, 0));
  ASSERT_TRUE(eventually([&] {
    auto rows = holders_of("reaped");
    // Below zero: "0 ms left" may still be a few microseconds before the expiry the reaper checks.
    return std::any_of(rows.begin(), rows.end(), [](auto& row) { return row.remaining.count() < 0; });
  })) << "the abandoned permit lapses";
  dblock::Reaper reaper(store_);
  EXPECT_GE(reaper.run_once().rows, 1u);
  auto rows = holders_of("reaped");
  ASSERT_EQ(rows.size(), 1u) << "only the live member is left";
  EXPECT_EQ(rows[0].token, live->token());
  EXPECT_FALSE(live->lost());
  live->release();
  EXPECT_TRUE(holders_of("reaped").empty());
}

// A membership of an owner taken afresh while that owner's membership row lives (its own
// acquisition landing after its reply was lost, when the owner holds the name again by then under a
// longer lease) must not shorten that row's lease: once it ends, the permit counts as free, or a
// writer finds no live reader, while the guard believing the longer lease still holds on.
TEST_P(Groups, AMembershipTakenAfreshByItsOwnerNeverShortensItsLease) {
  auto& backend = dblock::detail::StoreParts::backend(*store_).groups().get();
  for (auto kind : {dblock::HolderKind::permit, dblock::HolderKind::shared}) {
    std::string name = kind == dblock::HolderKind::permit ? "member-late/permit" : "member-late/reader";
    auto a = manager();
    auto held =
        a->try_acquire(name, kind == dblock::HolderKind::permit ? dblock::LockOptions{.ttl = 60s, .permits = 1}
                                                                : dblock::LockOptions{.ttl = 60s, .shared = true});
    ASSERT_TRUE(held) << name;
    auto reentered = a->try_acquire(name, kind == dblock::HolderKind::permit ? permits(1) : kShared);
    ASSERT_TRUE(reentered) << name;
    auto rows = holders_of(name);
    ASSERT_EQ(rows.size(), 1u) << name;
    ASSERT_EQ(rows[0].count, 2) << name;
    auto late = backend.try_acquire_member(name, rows[0].owner, kind, 1, 1s, 0);
    ASSERT_TRUE(late) << name << ": the owner's own membership is taken afresh";
    EXPECT_EQ(late->count, 1) << name;
    rows = holders_of(name);
    ASSERT_EQ(rows.size(), 1u) << name;
    EXPECT_GT(rows[0].remaining, 55s) << name << ": the membership's lease was shortened under its guard";
    EXPECT_LE(rows[0].remaining, 60s) << name << ": the later of the two leases, nothing added";
    auto other = manager();
    EXPECT_FALSE(other->try_acquire(name, kind == dblock::HolderKind::permit ? permits(1) : dblock::LockOptions{}))
        << name << ": another permit holder or a writer was let in";
    auto longer = backend.try_acquire_member(name, rows[0].owner, kind, 1, 120s, 0);
    ASSERT_TRUE(longer) << name;
    rows = holders_of(name);
    ASSERT_EQ(rows.size(), 1u) << name;
    EXPECT_GT(rows[0].remaining, 115s) << name << ": taken afresh for longer, it gets its own lease";
    if (kind == dblock::HolderKind::permit) {
      EXPECT_NE(late->token, held->token()) << "a permit taken afresh has a token of its own";
      EXPECT_EQ(rows[0].count, 1) << "a permit taken afresh starts its count again";
      EXPECT_THROW(reentered->release(), dblock::LockLost) << "the guard's permit was taken afresh";
    } else {
      EXPECT_EQ(late->token, held->token()) << "a reader's own membership of its group keeps its token";
      EXPECT_EQ(rows[0].count, 4) << "a reader taken afresh twice keeps its two levels and adds two";
    }
  }
}

// A reader's membership taken afresh by its owner while its row lives keeps its token. If it also
// reset the count to 1, the release of a level an earlier guard still holds (an inner re-entry here;
// a release whose reply was lost and lands late behaves alike) would delete the membership under
// the other guards of the owner, and a writer would be let in beside a reader who still believes.
TEST_P(Groups, AReadersMembershipTakenAfreshKeepsTheLevelsItsGuardsStillRelease) {
  auto& backend = dblock::detail::StoreParts::backend(*store_).groups().get();
  auto a = manager(), writer = manager();
  const dblock::LockOptions reader{.ttl = 60s, .shared = true};
  auto outer = a->try_acquire("member-late/levels", reader);
  ASSERT_TRUE(outer);
  auto inner = a->try_acquire("member-late/levels", reader);
  ASSERT_TRUE(inner);
  auto rows = holders_of("member-late/levels");
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_EQ(rows[0].count, 2);
  auto owner = rows[0].owner;
  auto late = backend.try_acquire_member("member-late/levels", owner, dblock::HolderKind::shared, 0, 1s, 0);
  ASSERT_TRUE(late) << "the owner's own membership is taken afresh";
  EXPECT_EQ(late->count, 1);
  EXPECT_EQ(late->token, outer->token()) << "a reader's own membership of its group keeps its token";
  inner->release();
  rows = holders_of("member-late/levels");
  ASSERT_EQ(rows.size(), 1u) << "the inner guard's release deleted the membership its outer guard holds";
  EXPECT_EQ(rows[0].count, 2) << "the outer guard's level and the one taken afresh";
  EXPECT_FALSE(writer->try_acquire("member-late/levels")) << "a writer beside a reader who believes";
  EXPECT_FALSE(outer->lost());
  outer->release();
  rows = holders_of("member-late/levels");
  ASSERT_EQ(rows.size(), 1u) << "the level taken afresh is still held";
  EXPECT_EQ(rows[0].count, 1);
  EXPECT_FALSE(writer->try_acquire("member-late/levels")) << "a writer beside the level taken afresh";
  EXPECT_TRUE(backend.release_member("member-late/levels", owner, dblock::HolderKind::shared, late->token));
  EXPECT_TRUE(holders_of("member-late/levels").empty());
  EXPECT_TRUE(writer->try_acquire("member-late/levels")) << "the name is free once every level is given back";
}

// A reader's membership that lapsed and was deleted by the reaper, taken afresh by its owner, is a
// new membership with a token of its own (schema 13). A release of the old one still in flight (a
// statement stalled for longer than a lease) then misses it. When a reader's token was its group's
// epoch, that release deleted the new membership, and a writer was let in beside its reader.
TEST_P(Groups, AReadersMembershipTakenAfreshAfterItWasReapedHasATokenOfItsOwn) {
  auto& backend = dblock::detail::StoreParts::backend(*store_).groups().get();
  auto keeper = manager(), writer = manager();
  auto kept = keeper->try_acquire("member-reaped", dblock::LockOptions{.ttl = 60s, .shared = true});
  ASSERT_TRUE(kept) << "another reader keeps the group alive";
  auto lapsed = backend.try_acquire_member("member-reaped", "lapser", dblock::HolderKind::shared, 0, 20ms, 0);
  ASSERT_TRUE(lapsed);
  EXPECT_NE(lapsed->token, kept->token()) << "a reader that joins a group draws a token of its own";
  auto lapser_rows = [&] {
    std::vector<dblock::LockInfo> rows;
    for (auto& row : holders_of("member-reaped"))
      if (row.owner == "lapser") rows.push_back(row);
    return rows;
  };
  ASSERT_TRUE(eventually([&] {
    auto rows = lapser_rows();
    // Below zero: "0 ms left" may still be a few microseconds before the expiry the reaper checks.
    return rows.size() == 1 && rows[0].remaining.count() < 0;
  })) << "the membership lapses";
  EXPECT_GE(dblock::Reaper(store_).run_once().rows, 1u);
  ASSERT_TRUE(lapser_rows().empty()) << "the reaper deleted the lapsed membership";
  auto afresh = backend.try_acquire_member("member-reaped", "lapser", dblock::HolderKind::shared, 0, 60s, 0);
  ASSERT_TRUE(afresh) << "the owner takes the membership afresh";
  EXPECT_NE(afresh->token, lapsed->token) << "a membership taken afresh after it was deleted has a new token";
  EXPECT_FALSE(backend.release_member("member-reaped", "lapser", dblock::HolderKind::shared, lapsed->token))
      << "the late release of the old membership found one to release";
  auto rows = lapser_rows();
  ASSERT_EQ(rows.size(), 1u) << "the late release deleted the membership taken afresh";
  EXPECT_EQ(rows[0].count, 1);
  kept->release();
  EXPECT_FALSE(writer->try_acquire("member-reaped")) << "a writer beside the reader taken afresh";
  EXPECT_TRUE(backend.release_member("member-reaped", "lapser", dblock::HolderKind::shared, afresh->token));
  EXPECT_TRUE(writer->try_acquire("member-reaped")) << "the name is free once the reader gives it back";
}

// A call that touches a membership waits for its group's row behind whoever holds it. Renewals of
// members, a member's re-entry on MySQL/MariaDB and the fence of a member used to read the clock
// before that wait (schemas 14 and 15 read it after): a membership whose lease ended meanwhile, and
// whose place the holder of the row gave to another, was still live by that early reading. It was
// renewed, re-entered or fenced, one member more than the group's capacity. Here the test's own
// transaction holds the row, lets the member lapse, takes the freed place through the SQL contract's
// acquire_member, and commits; the call that waited behind it runs on another thread.
class GroupsAfterAWait : public Groups {
 protected:
  void SetUp() override {
    Groups::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // PostgreSQL's acquire_member takes an advisory lock keyed by the name alone: installations that
    // share a database (the other cases running at once) must not share it.
    name_ = installation_->prefix() + "after-wait";
    keeper_ = manager();
    kept_ = keeper_->try_acquire(name_, dblock::LockOptions{.ttl = 60s, .permits = 2});
    ASSERT_TRUE(kept_) << "a member that keeps the group's row live";
    auto lapsing = backend().try_acquire_member(name_, "lapser", dblock::HolderKind::permit, 2, 3s, 0);
    ASSERT_TRUE(lapsing);
    lapser_token_ = lapsing->token;
  }

  [[nodiscard]] bool postgres() const { return std::string(GetParam().dialect) == "postgresql"; }
  dblock::detail::GroupBackend& backend() { return dblock::detail::StoreParts::backend(*store_).groups().get(); }

  /// Starts `call` on another thread while the group's row is held, lets the lapser's lease end while
  /// the call waits for the row (statement text `pg_function` on PostgreSQL), gives its place to
  /// "taker", and commits. Returns the call's future once it may go on; fails the test if the call
  /// did not wait or the lease did not end meanwhile.
  template <class Call>
  auto behind_a_lapse(const std::string& pg_function, Call call) {
    auto& admin = installation_->admin();
    const auto& prefix = installation_->prefix();
    admin.exec(postgres() ? "BEGIN" : "START TRANSACTION");
    // As acquire_member itself on PostgreSQL: the name's transaction-level advisory lock first
    // (0013), then the row; a re-entry that waits then waits for the former.
    if (postgres())
      admin.query(fmt::format("SELECT pg_advisory_xact_lock(hashtextextended('{}', 7310958615390432069))", name_));
    auto locks = postgres() ? fmt::format("\"{}locks\"", prefix) : fmt::format("`{}locks`", prefix);
    admin.query(fmt::format("SELECT name FROM {} WHERE name = '{}' FOR UPDATE", locks, name_));
    auto result = std::async(std::launch::async, std::move(call));
    // MariaDB shows the statement inside the function that waits, which names this test's table (a
    // Galera node lists no lock wait in innodb_trx for it, so the process list it is). PostgreSQL
    // keeps the first pg_stat_activity it shows a transaction until that transaction ends, and this
    // one is open: each look clears that snapshot first (else a call slower to start than the first
    // look, under ThreadSanitizer in CI, was never seen waiting).
    auto waits = [&] {
      if (postgres()) admin.query("SELECT pg_stat_clear_snapshot()");
      auto waiting = admin.query(
          postgres() ? fmt::format("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                   "AND query LIKE '%{}%'",
                                   pg_function)
                     : fmt::format("SELECT count(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() "
                                   "AND info LIKE '%{}locks%'",
                                   prefix));
      return std::stoll(waiting.at(0)) > 0;
    };
    auto lapser_left = [&] {
      for (auto& row : holders_of(name_))
        if (row.owner == "lapser") return row.remaining;
      return std::chrono::milliseconds::min();
    };
    bool waited = eventually(waits);
    bool lapsed_while_waiting = waited && lapser_left() > 0ms && eventually([&] { return lapser_left() < 0ms; });
    if (postgres())
      admin.query(fmt::format("SELECT lock_count FROM \"{}acquire_member\"('{}', 'taker', 'permit', 2, 60000, 0)",
                              prefix, name_));
    else
      admin.query(fmt::format("SELECT `{}acquire_member`('{}', 'taker', 'permit', 2, 60000000, 0)", prefix, name_));
    admin.exec("COMMIT");
    EXPECT_TRUE(lapsed_while_waiting) << "the call waited for the row (" << waited
                                      << ") while the member's lease ended";
    return result;
  }

  /// The group's live members: the keeper and the taker, never a third of two permits.
  void expect_two_live_members() {
    int live = 0;
    for (auto& row : holders_of(name_)) live += row.remaining > 0ms ? 1 : 0;
    EXPECT_EQ(live, 2) << "the keeper and the taker, no third member of two permits";
  }

  std::string name_;
  std::unique_ptr<dblock::LockManager> keeper_;
  std::optional<dblock::Lock> kept_;
  std::int64_t lapser_token_ = 0;
};

// Schema 16: a renewal no longer waits for a group's row at all, so the lapse above cannot happen
// while it waits; a group's row another transaction holds (a member's fence) leaves its
// memberships alone, busy: neither renewed nor lost.
TEST_P(GroupsAfterAWait, ARenewalNeverWaitsForAGroupsRowAnotherTransactionHoldsAndRenewsNoMemberThen) {
  const dblock::detail::HeldRef held{
      .name = name_, .owner = "lapser", .token = lapser_token_, .ttl = 60s, .kind = dblock::HolderKind::permit};
  auto& admin = installation_->admin();
  admin.exec(postgres() ? "BEGIN" : "START TRANSACTION");
  admin.query(postgres() ? fmt::format("SELECT name FROM \"{}locks\" WHERE name = '{}' FOR SHARE",
                                       installation_->prefix(), name_)
                         : fmt::format("SELECT name FROM `{}locks` WHERE name = '{}' LOCK IN SHARE MODE",
                                       installation_->prefix(), name_));
  auto renewal = std::async(std::launch::async, [&] {
    return backend().renew_members(std::span(&held, 1), std::chrono::steady_clock::now() + 30s);
  });
  auto answered = renewal.wait_for(20s) == std::future_status::ready;
  admin.exec("COMMIT");
  ASSERT_TRUE(answered) << "the renewal waited for the transaction";
  auto result = renewal.get();
  EXPECT_TRUE(result.renewed.empty()) << "a membership whose group's row another transaction held was renewed";
  EXPECT_EQ(result.busy, std::vector<std::size_t>{0}) << "it is left alone, busy, not lost";
}

TEST_P(GroupsAfterAWait, AReEntryDoesNotRenewAMembershipWhoseLeaseEndedWhileItWaited) {
  auto reentry = behind_a_lapse("acquire_member", [&] {
    return backend().try_acquire_member(name_, "lapser", dblock::HolderKind::permit, 2, 60s, lapser_token_);
  });
  auto granted = reentry.get();
  EXPECT_FALSE(granted) << "a membership whose lease ended while its re-entry waited was re-entered (count "
                        << (granted ? granted->count : 0) << ")";
  expect_two_live_members();
}

TEST_P(GroupsAfterAWait, TheFenceOfAMemberWhoseLeaseEndedWhileItWaitedRefuses) {
  auto app = dblock::test::make_admin(GetParam().dialect, dblock::test::admin_dsn(GetParam(), server_dsn_),
                                      dblock::test::default_schema(GetParam()), installation_->prefix());
  const auto& prefix = installation_->prefix();
  auto fence = behind_a_lapse("fence_member", [&] {
    app->exec(postgres() ? "BEGIN" : "START TRANSACTION");
    auto sql =
        postgres()
            ? fmt::format("SELECT \"{}fence_member\"('{}', 'lapser', 'permit', {})", prefix, name_, lapser_token_)
            : fmt::format("SELECT `{}fence_member`('{}', 'lapser', 'permit', {})", prefix, name_, lapser_token_);
    try {
      auto left = app->query(sql);
      return left.empty() ? std::string("no row") : left.front();
    } catch (const std::exception& e) {
      return std::string("refused: ") + e.what();
    }
  });
  auto outcome = fence.get();
  app->exec("ROLLBACK");
  EXPECT_TRUE(outcome.starts_with("refused: ") && outcome.find("not a live member") != std::string::npos)
      << "the fence let a member whose lease ended while it waited write, with this lease left: " << outcome;
  expect_two_live_members();
}

TEST(GroupsInAdvisoryMode, PermitsNeedTableMode) {
  std::string dsn;
  DBLOCK_REQUIRE_BACKEND_DSN(dsn, dblock::test::kPostgresAdvisory);
  dblock::test::Installation installation(dblock::test::kPostgresAdvisory, dsn);
  dblock::LockManager advisory(installation.store(), {.mode = dblock::LockMode::advisory});
  EXPECT_THROW((void)advisory.try_acquire("x", permits(2)), dblock::InvalidArgument);
  dblock::LockManager table(installation.store());
  EXPECT_THROW((void)table.try_acquire("x", {.shared = true, .permits = 2}), dblock::InvalidArgument);
  EXPECT_THROW((void)table.try_acquire("x", permits(-1)), dblock::InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, Groups,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kPgBouncerTable, dblock::test::kMysqlTable,
                              dblock::test::kSqlite, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });
// Not through PgBouncer: the same functions as postgres_table, and a call the pooler queues for a
// server connection (the test's transaction holds one) does not wait where the test looks. Not on
// SQLite: its one writer takes the write lock before any statement, so nothing reads a clock before
// a wait (migrations/sqlite/0014, 0015), and there is no row lock to wait behind.
INSTANTIATE_TEST_SUITE_P(Backends, GroupsAfterAWait,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
