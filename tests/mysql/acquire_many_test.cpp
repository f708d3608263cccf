// MySQL/MariaDB's combined statements (migration 0011's acquire_many and release_last_many, through
// MyLocks): every request of a batch gets the outcome its single statement would have given, at
// its position; names out of order are refused with nothing written; a release deletes only the
// rows that carry its owner and token. The answers' parsers are checked on their own first.
// DBLOCK_TEST_MYSQL_DSN may name a Galera node too: the backend then takes its Galera path.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "backends/mysql/my_sql.hpp"
#include "core/store_parts.hpp"
#include "support/admin.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using dblock::detail::AcquireRequest;
using dblock::detail::ReleaseRequest;

namespace {

TEST(MyCombinedAnswers, PositionsWithGrantsLandAtTheirRequests) {
  using dblock::detail::parse_positions_with_grants;
  auto none = parse_positions_with_grants("", 3);
  ASSERT_EQ(none.size(), 3u);
  EXPECT_FALSE(none[0] || none[1] || none[2]);
  auto one = parse_positions_with_grants("1 2 17", 3);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_FALSE(one[0]);
  ASSERT_TRUE(one[1]);
  EXPECT_EQ(one[1]->count, 2);
  EXPECT_EQ(one[1]->token, 17);
  EXPECT_FALSE(one[2]);
  auto several = parse_positions_with_grants("0 1 5,2 3 9000000000", 3);
  ASSERT_TRUE(several[0] && several[2]);
  EXPECT_FALSE(several[1]);
  EXPECT_EQ(several[0]->token, 5);
  EXPECT_EQ(several[2]->count, 3);
  EXPECT_EQ(several[2]->token, 9'000'000'000);
  for (const char* malformed : {"3 1 1", "0 1", "0 1 2 3", "0,1 1 1", "x 1 1", "0 1 1,", "-1 1 1", "0  1 1"})
    EXPECT_THROW((void)parse_positions_with_grants(malformed, 3), dblock::DatabaseError) << malformed;
}

TEST(MyCombinedAnswers, PositionsMarkTheDeletedReleases) {
  using dblock::detail::parse_positions;
  EXPECT_EQ(parse_positions("", 2), (std::vector<bool>{false, false}));
  EXPECT_EQ(parse_positions("1", 2), (std::vector<bool>{false, true}));
  EXPECT_EQ(parse_positions("0,1", 2), (std::vector<bool>{true, true}));
  for (const char* malformed : {"2", "0 1", "0,", "a"})
    EXPECT_THROW((void)parse_positions(malformed, 2), dblock::DatabaseError) << malformed;
}

class MyCombined : public ::testing::Test {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_DSN(server_dsn_, "DBLOCK_TEST_MYSQL_DSN");
    installation_ = std::make_unique<dblock::test::Installation>("mysql", server_dsn_);
    admin_ = &installation_->admin();
    backend_ = &dblock::detail::StoreParts::backend(*installation_->store()).locks();
  }

  /// `column` (an SQL expression) of the row of `name`, or "" when there is none.
  std::string cell(const std::string& column, const std::string& name) {
    auto rows = admin_->query(
        fmt::format("SELECT {} FROM \"{}locks\" WHERE name = '{}'", column, installation_->prefix(), name));
    return rows.empty() ? "" : rows.front();
  }
  /// The row of `name` as "owner count token", or "" when there is none.
  std::string row(const std::string& name) { return cell("CONCAT(owner, ' ', count, ' ', token)", name); }

  std::string server_dsn_;
  std::unique_ptr<dblock::test::Installation> installation_;
  dblock::test::Admin* admin_ = nullptr;
  dblock::detail::LockBackend* backend_ = nullptr;
};

TEST_F(MyCombined, EachRequestOfABatchGetsItsSingleStatementsOutcomeAtItsPosition) {
  ASSERT_GT(backend_->max_batch(), 1u);
  ASSERT_TRUE(backend_->try_acquire("b-refused", "m2", 60s, 0));
  auto held = backend_->try_acquire("c-reentered", "m1", 60s, 0);
  ASSERT_TRUE(held);
  ASSERT_TRUE(backend_->try_acquire("d-expired", "m2", 60s, 0));
  admin_->expire("d-expired");
  auto expired_token = std::stoll(cell("token", "d-expired"));
  auto refused_row = row("b-refused");

  std::vector<AcquireRequest> batch{{"a-fresh", "m1", 60s, 0, 0ms},
                                    {"b-refused", "m1", 60s, 0, 0ms},
                                    {"c-reentered", "m1", 60s, held->token, 0ms},
                                    {"d-expired", "m1", 60s, 0, 2000ms}};
  auto outcomes = backend_->try_acquire_many(batch);
  ASSERT_EQ(outcomes.size(), 4u);
  ASSERT_TRUE(outcomes[0]) << "fresh";
  EXPECT_EQ(outcomes[0]->count, 1);
  EXPECT_FALSE(outcomes[1]) << "held live by another owner";
  ASSERT_TRUE(outcomes[2]) << "re-entered";
  EXPECT_EQ(outcomes[2]->count, 2);
  EXPECT_EQ(outcomes[2]->token, held->token);
  ASSERT_TRUE(outcomes[3]) << "expired: taken over";
  EXPECT_EQ(outcomes[3]->count, 1);
  EXPECT_GT(outcomes[3]->token, expired_token);

  // The table says the same: each token is the one answered, the refused row is untouched.
  EXPECT_EQ(row("a-fresh"), fmt::format("m1 1 {}", outcomes[0]->token));
  EXPECT_EQ(row("b-refused"), refused_row);
  EXPECT_EQ(row("c-reentered"), fmt::format("m1 2 {}", held->token));
  EXPECT_EQ(row("d-expired"), fmt::format("m1 1 {}", outcomes[3]->token));
  EXPECT_NE(outcomes[0]->token, outcomes[3]->token);
  // Its own lock-delay only where it was asked for (0008's rules, per name).
  EXPECT_EQ(cell("lock_delay_ms", "d-expired"), "2000");
  EXPECT_EQ(cell("lock_delay_ms", "a-fresh"), "0");
  // One statement, one clock reading: every name granted anew has the same acquired_at, and the
  // delayed grant's lease runs from it: expires_at is its TTL plus its delay later.
  EXPECT_EQ(cell("acquired_at", "a-fresh"), cell("acquired_at", "d-expired"));
  EXPECT_EQ(cell("TIMESTAMPDIFF(MICROSECOND, acquired_at, expires_at)", "d-expired"), "62000000");
}

TEST_F(MyCombined, NamesOutOfOrderOrRepeatedAreRefusedWithNothingWritten) {
  // "b" comes first and is written before "a" is found out of order: the whole call rolls back.
  std::vector<AcquireRequest> unordered{{"b", "m1", 60s, 0, 0ms}, {"a", "m1", 60s, 0, 0ms}};
  EXPECT_THROW((void)backend_->try_acquire_many(unordered), dblock::Error);
  std::vector<AcquireRequest> repeated{{"a", "m1", 60s, 0, 0ms}, {"a", "m1", 60s, 0, 0ms}};
  EXPECT_THROW((void)backend_->try_acquire_many(repeated), dblock::Error);
  EXPECT_EQ(row("a"), "");
  EXPECT_EQ(row("b"), "");

  auto b = backend_->try_acquire("b", "m1", 60s, 0);
  auto c = backend_->try_acquire("c", "m1", 60s, 0);
  ASSERT_TRUE(b && c);
  std::vector<ReleaseRequest> releases{{"c", "m1", c->token}, {"b", "m1", b->token}};
  EXPECT_THROW((void)backend_->release_last_many(releases), dblock::Error);
  EXPECT_EQ(row("c"), fmt::format("m1 1 {}", c->token)) << "deleted first, then rolled back";
  EXPECT_EQ(row("b"), fmt::format("m1 1 {}", b->token));
}

TEST_F(MyCombined, ReleaseLastManyDeletesOnlyTheRowsCarryingThatOwnerAndToken) {
  auto a = backend_->try_acquire("a-mine", "m1", 60s, 0);
  ASSERT_TRUE(a);
  ASSERT_TRUE(backend_->try_acquire("a-mine", "m1", 60s, a->token));  // count 2: the last level goes whole
  auto b = backend_->try_acquire("b-other-token", "m1", 60s, 0);
  auto c = backend_->try_acquire("c-other-owner", "m2", 60s, 0);
  auto e = backend_->try_acquire("e-mine", "m1", 60s, 0);
  ASSERT_TRUE(b && c && e);
  std::vector<ReleaseRequest> releases{{"a-mine", "m1", a->token},
                                       {"b-other-token", "m1", b->token + 1000},
                                       {"c-other-owner", "m1", c->token},
                                       {"d-no-row", "m1", 1},
                                       {"e-mine", "M1", e->token}};  // owners compare byte for byte
  EXPECT_EQ(backend_->release_last_many(releases), (std::vector<bool>{true, false, false, false, false}));
  EXPECT_EQ(row("a-mine"), "");
  EXPECT_EQ(row("b-other-token"), fmt::format("m1 1 {}", b->token));
  EXPECT_EQ(row("c-other-owner"), fmt::format("m2 1 {}", c->token));
  EXPECT_EQ(row("e-mine"), fmt::format("m1 1 {}", e->token));
  std::vector<ReleaseRequest> mine{{"b-other-token", "m1", b->token}, {"e-mine", "m1", e->token}};
  EXPECT_EQ(backend_->release_last_many(mine), (std::vector<bool>{true, true}));
  EXPECT_EQ(row("b-other-token"), "");
  EXPECT_EQ(row("e-mine"), "");
}

}  // namespace
