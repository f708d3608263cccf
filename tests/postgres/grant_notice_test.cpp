// The fair queue's release names the waiter it granted (migration 0020): on the grant channel, the
// waiter's owner, its row's seq and the grant's token, then the name plainly on the release channel,
// as every release that wakes waiters; and what the listener makes of a payload it cannot read.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/backend.hpp"
#include "backends/postgres/pg_listener.hpp"
#include "core/store_parts.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

TEST(GrantNotices, AHandOffNamesItsWaiterItsSeqAndTokenThenTheNamePlainly) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  dblock::test::Installation installation("postgresql", server_dsn);
  auto& backend = dblock::detail::StoreParts::backend(*installation.store());
  auto listener = backend.notifications().get().listen();
  ASSERT_NE(listener, nullptr);
  const std::string name = "notice/a name\nwith a newline";
  listener->watch(name);
  auto held = backend.locks().try_acquire(name, "holder", 30s, 0);
  ASSERT_TRUE(held);
  auto& queue = backend.queue().get();
  auto turn = queue.take_turn(name, "waiter-b", 30s, 30s, 0);
  ASSERT_GT(turn.seq, 0) << "the waiter queued behind the holder";
  ASSERT_TRUE(queue.release_handing_off(name, "holder", held->token, ""));
  auto row = backend.locks().read(name);
  ASSERT_TRUE(row);
  ASSERT_EQ(row->owner, "waiter-b");
  std::vector<dblock::detail::ReleaseNotice> heard;
  ASSERT_TRUE(dblock::test::eventually(
      [&] {
        for (auto& notice : listener->wait(100ms)) heard.push_back(std::move(notice));
        return heard.size() >= 2;
      },
      10s));
  ASSERT_EQ(heard.size(), 2U);
  ASSERT_TRUE(heard[0].grant) << "the grant's notice comes first";
  EXPECT_EQ(heard[0].name, name);
  EXPECT_EQ(heard[0].grant->owner, "waiter-b");
  EXPECT_EQ(heard[0].grant->seq, turn.seq);
  EXPECT_EQ(heard[0].grant->token, row->token);
  EXPECT_FALSE(heard[1].grant) << "then the name plainly, for listeners that do not read grants";
  EXPECT_EQ(heard[1].name, name);
}

TEST(GrantNotices, APayloadThatIsNotAGrantIsDropped) {
  using dblock::detail::parse_pg_grant_notice;
  auto parsed = parse_pg_grant_notice("12\n34\nowner\nname\nwith\nlines");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->name, "name\nwith\nlines");
  EXPECT_EQ(parsed->grant->owner, "owner");
  EXPECT_EQ(parsed->grant->seq, 12);
  EXPECT_EQ(parsed->grant->token, 34);
  for (const char* bad : {"", "12", "12\n34", "12\n34\nowner", "12\n34\nowner\n", "12\n34\n\nname", "x\n34\no\nn",
                          "12\n3x\no\nn", "0\n34\no\nn", "12\n-1\no\nn", "12 \n34\no\nn"})
    EXPECT_FALSE(parse_pg_grant_notice(bad)) << "'" << bad << "'";
}

}  // namespace
