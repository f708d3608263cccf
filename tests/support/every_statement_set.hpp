#pragma once
// Every statement set a backend prepares, run on one store with each result checked: table mode,
// groups, combined statements, migrations, occurrence records, a fenced transaction, the reaper and
// the bench floor. On a store opened with pool=1 they all meet on one session, whose prepared
// statements are cached by id: two texts under one id would run the wrong statement, and a check
// here fails (a wrong result, or a server error for the wrong parameters).

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/group_backend.hpp"
#include "backends/lock_backend.hpp"
#include "backends/queue_backend.hpp"
#include "core/bench_floor.hpp"
#include "core/store_parts.hpp"

namespace dblock::test {

/// One round over every statement set of `store`'s backend; `round` keeps the names of one round
/// apart from another's. Advisory mode is left to the caller (its locks and keys differ by dialect).
inline void run_every_statement_set(const std::shared_ptr<Store>& store, int round) {
  using namespace std::chrono_literals;
  namespace d = dblock::detail;
  auto& backend = d::StoreParts::backend(*store);
  d::LockBackend& locks = backend.locks();
  d::GroupBackend& groups = backend.groups().get();
  const auto name = fmt::format("one-session-{}", round);
  const std::string owner = "one-session-owner", other = "one-session-other";
  auto reply_by = [] { return std::chrono::steady_clock::now() + 10s; };

  // Table mode: acquire, refuse, re-enter, lease left, renew, list, release a level, release.
  auto grant = locks.try_acquire(name, owner, 60s, 0);
  ASSERT_TRUE(grant);
  EXPECT_EQ(grant->count, 1);
  EXPECT_FALSE(locks.try_acquire(name, other, 60s, 0)) << "held by another owner";
  auto again = locks.try_acquire(name, owner, 60s, grant->token);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->count, 2);
  EXPECT_EQ(again->token, grant->token);
  auto left = locks.lease_left(name);
  ASSERT_TRUE(left);
  EXPECT_GT(*left, 30s);
  std::array held{d::HeldRef{name, owner, grant->token, 90s}};
  EXPECT_EQ(locks.renew(held, reply_by()).renewed, std::vector<std::size_t>{0});
  auto row = locks.read(name);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->owner, owner);
  EXPECT_EQ(row->count, 2);
  EXPECT_GT(row->remaining, 60s) << "renewed to 90 s";
  EXPECT_EQ(locks.release(name, owner, grant->token), 1);
  EXPECT_EQ(locks.release_last(name, owner, grant->token), 0);
  EXPECT_FALSE(locks.read(name));

  // A request to let go, revocation, its acknowledgement, a minimum hold, force release.
  grant = locks.try_acquire(name, owner, 60s, 0);
  ASSERT_TRUE(grant);
  EXPECT_TRUE(locks.ask_release(name));
  EXPECT_TRUE(locks.ask_release(name)) << "asked twice";
  auto asked = locks.renew(std::array{d::HeldRef{name, owner, grant->token, 90s}}, reply_by());
  EXPECT_EQ(asked.renewed, std::vector<std::size_t>{0});
  EXPECT_EQ(asked.asked, std::vector<std::size_t>{0});
  EXPECT_TRUE(locks.revoke(name));
  EXPECT_TRUE(locks.acknowledge_revoked(name, owner, grant->token));
  grant = locks.try_acquire(name, owner, 60s, 0);
  ASSERT_TRUE(grant);
  EXPECT_TRUE(locks.release_keeping(name, owner, grant->token, 60s));
  EXPECT_FALSE(locks.try_acquire(name, other, 60s, 0)) << "kept for its minimum hold";
  EXPECT_TRUE(locks.force_release(name));
  EXPECT_FALSE(locks.force_release(name));

  // Combined acquisitions and releases, where the backend combines.
  if (locks.max_batch() > 1) {
    const auto first = name + "-a", second = name + "-b";
    std::array requests{d::AcquireRequest{first, owner, 60s, 0, 0ms}, d::AcquireRequest{second, owner, 60s, 0, 0ms}};
    auto grants = locks.try_acquire_many(requests);
    ASSERT_EQ(grants.size(), 2u);
    ASSERT_TRUE(grants[0] && grants[1]);
    EXPECT_EQ(grants[0]->count, 1);
    EXPECT_GT(grants[1]->token, 0);  // Galera draws tokens per name: two names may share one
    std::array releases{d::ReleaseRequest{first, owner, grants[0]->token},
                        d::ReleaseRequest{second, owner, grants[1]->token + 1}};
    EXPECT_EQ(locks.release_last_many(releases), (std::vector<bool>{true, false})) << "the second's token is wrong";
    EXPECT_EQ(locks.release_last(second, owner, grants[1]->token), 0);
  }

  // Groups: a semaphore's members, a read-write lock's readers and a waiting writer's mark.
  const auto permits = name + "-permits", readers = name + "-readers";
  auto member = groups.try_acquire_member(permits, owner, HolderKind::permit, 2, 60s, 0);
  auto second_member = groups.try_acquire_member(permits, other, HolderKind::permit, 2, 60s, 0);
  ASSERT_TRUE(member && second_member);
  EXPECT_FALSE(groups.try_acquire_member(permits, "third", HolderKind::permit, 2, 60s, 0)) << "two permits";
  std::array members{d::HeldRef{permits, owner, member->token, 60s, HolderKind::permit},
                     d::HeldRef{permits, other, second_member->token + 1, 60s, HolderKind::permit}};
  EXPECT_EQ(groups.renew_members(members, reply_by()).renewed, std::vector<std::size_t>{0})
      << "the second's token is wrong";
  auto first_end = groups.first_lease_end(permits);
  ASSERT_TRUE(first_end);
  EXPECT_GT(*first_end, 30s);
  EXPECT_EQ(groups.release_member(permits, other, HolderKind::permit, second_member->token), 0);
  EXPECT_EQ(locks.list_first(10).size(), 1u) << "one permit holder left";
  EXPECT_EQ(groups.release_member(permits, owner, HolderKind::permit, member->token), 0);
  EXPECT_FALSE(groups.release_member(permits, owner, HolderKind::permit, member->token)) << "released already";
  EXPECT_TRUE(locks.list_first(10).empty());
  auto reader = groups.try_acquire_member(readers, owner, HolderKind::shared, 0, 60s, 0);
  ASSERT_TRUE(reader);
  bool marked = false;
  auto readers_left = groups.lease_left_marking_writer(readers, other, 5s, marked);
  ASSERT_TRUE(readers_left);
  EXPECT_TRUE(marked) << "a writer waits on a live reader";
  groups.unmark_writer(readers, other);
  EXPECT_EQ(groups.release_member(readers, owner, HolderKind::shared, reader->token), 0);
  EXPECT_FALSE(locks.read(readers));
  bool unmarked = true;
  EXPECT_FALSE(groups.lease_left_marking_writer(readers, other, 5s, unmarked)) << "nobody holds it now";
  EXPECT_FALSE(unmarked);

  // The fair queue, where the backend has it: queue, look, renew, hand off, leave, reap.
  if (auto* queue = backend.queue().get_if()) {
    const auto queued = name + "-queued";
    auto holder = queue->take_turn(queued, owner, 60s, 60s, 0);
    ASSERT_TRUE(holder.grant) << "a free name is taken at once";
    auto waiting = queue->take_turn(queued, other, 60s, 60s, 0);
    ASSERT_GT(waiting.seq, 0) << "a held name queues";
    EXPECT_TRUE(queue->look(queued, other, waiting.seq).queued);
    EXPECT_FALSE(queue->take_turn(queued, other, 60s, 60s, waiting.seq).grant) << "renewed, still queued";
    const auto third = owner + "-third";
    auto later = queue->take_turn(queued, third, 60s, 60s, 0);
    ASSERT_GT(later.seq, waiting.seq);
    EXPECT_EQ(queue->release_handing_off(queued, owner, holder.grant->token, third), 0);
    auto named = queue->look(queued, third, later.seq);
    ASSERT_TRUE(named.grant) << "the named successor goes ahead of the earlier waiter";
    EXPECT_TRUE(queue->look(queued, other, waiting.seq).queued);
    EXPECT_EQ(queue->release_handing_off(queued, third, named.grant->token, {}), 0);
    auto look = queue->look(queued, other, waiting.seq);
    EXPECT_FALSE(look.queued);
    ASSERT_TRUE(look.grant) << "handed on";
    EXPECT_FALSE(queue->leave(queued, other, waiting.seq)) << "granted: nothing to leave";
    EXPECT_EQ(queue->waiter_rows(queued), 0u);
    EXPECT_EQ(queue->reap_waiters(10), 0u);
    EXPECT_EQ(queue->release_handing_off(queued, other, look.grant->token, {}), 0);
  }

  // Migrations: status and verify read the history and the catalog.
  Migrator migrator(store);
  auto status = migrator.status();
  ASSERT_FALSE(status.empty());
  EXPECT_NO_THROW(migrator.verify());

  // Occurrence records and a fenced transaction, under a lock of the public API.
  LockManager manager(store);
  auto lock = manager.try_acquire(name);
  ASSERT_TRUE(lock);
  {
    auto occurrence = Occurrence::claim(store, *lock, {.key = fmt::format("run-{}", round)});
    ASSERT_TRUE(occurrence.claimed());
    EXPECT_TRUE(occurrence.finish(0));
  }
  bool listed = false;
  for (const auto& record : occurrences(*store))
    listed = listed || (record.name == name && record.status == OccurrenceStatus::succeeded);
  EXPECT_TRUE(listed) << "the finished occurrence is listed";
  store->fenced(FenceTarget(lock->name(), lock->token()), [&](FencedTransaction& tx) {
    auto rows = tx.query("SELECT 2 + 1");
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows.at(0).at(0), "3");
    // The text of a statement of dblock's own (a ping): the same text shares its prepared statement.
    EXPECT_EQ(tx.query("SELECT 1").at(0).at(0), "1");
  });
  EXPECT_EQ(store->census().held, 1);
  lock->release();

  // The reaper and the bench floor: seeded expired rows are reaped, a renewal of the floor's.
  d::BenchFloor floor(*store);
  const auto stem = name + "-expired-";
  floor.seed_expired(stem, 3);
  EXPECT_EQ(store->census().expired, 3);
  Reaper reaper(store);
  auto cycle = reaper.run_once();
  EXPECT_TRUE(cycle.ok);
  EXPECT_EQ(cycle.rows, 3u);
  grant = locks.try_acquire(name, owner, 60s, 0);
  ASSERT_TRUE(grant);
  std::array floor_held{d::HeldRef{name, owner, grant->token, 60s}};
  EXPECT_EQ(floor.renew(floor_held), 1u);
  EXPECT_EQ(locks.release_last(name, owner, grant->token), 0);
  // The raw clients run on sessions of their own, numbered with the store's statements.
  auto raw = floor.raw_client();
  auto token = raw->acquire(name, owner, 60'000);
  ASSERT_TRUE(token);
  EXPECT_TRUE(raw->blocking_lock(round));
  raw->blocking_unlock(round);
  EXPECT_TRUE(raw->release(name, owner, *token));
  EXPECT_TRUE(store->locks().empty());
}

}  // namespace dblock::test
