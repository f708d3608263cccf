// The fair queue's turn (migration 0020): a turn that only queues a waiter, or renews its waiter
// lease, commits without waiting for the disk; a turn that grants the name waits for it, as every
// grant does (doc/fair-queue.md, "What a hand-off costs").

#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/admin.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

namespace {

TEST(QueueTurns, OnlyATurnThatGrantsWaitsForTheDisk) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  dblock::test::Installation installation("postgresql", server_dsn);
  auto& admin = installation.admin();
  // The turn's result and the transaction's synchronous_commit after it, in one statement (one
  // transaction): a set-returning PL/pgSQL function has run to its end before the row is projected.
  auto turn = [&](const std::string& owner, long long seq) {
    auto rows = admin.query(fmt::format(
        R"(SELECT t.waiter_seq || ' ' || t.lock_count || ' ' || current_setting('synchronous_commit')
           FROM "public"."{}wait_turn"('queue/commit', '{}', 30000, 30000, {}) t)",
        installation.prefix(), owner, seq));
    EXPECT_EQ(rows.size(), 1u) << owner;
    return rows.empty() ? std::string() : rows.front();
  };
  EXPECT_EQ(turn("A", 0), "0 1 on") << "a free name, nobody waiting: granted, and the grant waits for the disk";
  auto queued = turn("B", 0);
  ASSERT_TRUE(queued.ends_with(" 0 off")) << "held by A: B queues, and its queueing does not wait: " << queued;
  auto seq = std::stoll(queued.substr(0, queued.find(' ')));
  EXPECT_EQ(turn("B", seq), fmt::format("{} 0 off", seq)) << "B's renewal of its waiter lease does not wait";
  admin.expire("queue/commit");
  EXPECT_EQ(turn("B", seq), "0 1 on") << "A's lease ended: B's turn takes the name, and waits for the disk";
}

}  // namespace
