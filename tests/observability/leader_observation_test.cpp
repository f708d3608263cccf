// Leader observation on a real PostgreSQL: who leads (owner, token, since when), a watcher that
// sees each change of term, a health check that fails while the leader cannot renew, and a
// failover when the leader's renewals are stuck behind a row lock.

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "observability/pg_fixture.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"

using namespace std::chrono_literals;
using dblock::test::eventually;

namespace {

class LeaderObservation : public dblock::test::PgObservability {
 protected:
  dblock::ElectionOptions options() {
    return {.manager = {.default_ttl = 1500ms}, .campaign_slice = 100ms, .retry_after_error = 100ms};
  }
};

/// Terms an observer reported, in order.
struct Seen {
  std::mutex mutex;
  std::vector<std::optional<dblock::LeaderInfo>> terms;
  void add(const std::optional<dblock::LeaderInfo>& leader) {
    std::lock_guard lock(mutex);
    terms.push_back(leader);
  }
  std::optional<dblock::LeaderInfo> last() {
    std::lock_guard lock(mutex);
    return terms.empty() ? std::nullopt : terms.back();
  }
  std::size_t size() {
    std::lock_guard lock(mutex);
    return terms.size();
  }
};

TEST_F(LeaderObservation, ReportsWhoLeadsSinceWhenAndWatchesAFailover) {
  Seen seen;
  dblock::LeaderObserver observer(store_, "obs/leader",
                                  {.interval = 20ms, .on_change = [&](const auto& l) { seen.add(l); }});
  ASSERT_TRUE(eventually([&] { return seen.size() >= 1; }));
  EXPECT_FALSE(seen.last()) << "nobody leads yet";
  EXPECT_FALSE(dblock::LeaderElection::leader(*store_, "obs/leader"));

  auto before = std::chrono::system_clock::now();
  auto first = std::make_unique<dblock::LeaderElection>(store_, "obs/leader", options());
  ASSERT_TRUE(eventually([&] { return first->is_leader(); }));
  auto leader = first->leader();
  ASSERT_TRUE(leader);
  EXPECT_EQ(leader->token, *first->token());
  EXPECT_FALSE(leader->owner.empty());
  EXPECT_GT(leader->lease_left, 0ms);
  // By the database's clock, placed on ours: within a second of the election (same host).
  EXPECT_GT(leader->since, before - 1s);
  EXPECT_LT(leader->since, std::chrono::system_clock::now() + 1s);
  EXPECT_TRUE(first->health().healthy) << first->health().detail;
  EXPECT_TRUE(first->health().leader);
  ASSERT_TRUE(eventually([&] {
    auto l = seen.last();
    return l && l->token == leader->token;
  }));

  dblock::LeaderElection second(store_, "obs/leader", options());
  auto follower = second.health();
  EXPECT_TRUE(follower.healthy) << follower.detail;
  EXPECT_FALSE(follower.leader);
  ASSERT_TRUE(second.leader());
  EXPECT_TRUE(second.leader()->same_term(*leader)) << "a follower sees the same leader";

  first.reset();  // resigns: the follower takes over
  ASSERT_TRUE(eventually([&] { return second.is_leader(); }));
  auto next = dblock::LeaderElection::leader(*store_, "obs/leader");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->token, *second.token());
  EXPECT_GT(next->token, leader->token);
  EXPECT_NE(next->owner, leader->owner);
  ASSERT_TRUE(eventually([&] {
    auto l = seen.last();
    return l && l->token == next->token;
  })) << "the observer reports the new term";
}

TEST_F(LeaderObservation, HealthFailsWhileTheLeaderCannotRenewAndTheFollowerTakesOver) {
  auto leader = std::make_unique<dblock::LeaderElection>(store_, "obs/stuck", options());
  ASSERT_TRUE(eventually([&] { return leader->is_leader(); }));
  dblock::LeaderElection follower(store_, "obs/stuck", options());
  auto old_term = *leader->leader();
  ASSERT_TRUE(leader->health().healthy);

  // A row lock on the leader's row: its renewals wait behind it and cannot succeed.
  admin_->exec("BEGIN");
  admin_->exec(fmt::format("SELECT 1 FROM \"public\".\"{}locks\" WHERE name = 'obs/stuck' FOR UPDATE", prefix_));
  bool unhealthy_while_leader = eventually(
      [&] {
        auto health = leader->health();
        return !health.healthy && health.leader;
      },
      5s);
  auto detail = leader->health().detail;
  ASSERT_TRUE(eventually([&] { return !leader->is_leader(); }, 5s)) << "the stuck leader steps down at its deadline";
  admin_->exec("COMMIT");
  EXPECT_TRUE(unhealthy_while_leader) << "health never failed while the lease ran out: " << detail;

  ASSERT_TRUE(eventually([&] { return follower.is_leader() || leader->is_leader(); }, 10s)) << "nobody took over";
  auto now = dblock::LeaderElection::leader(*store_, "obs/stuck");
  ASSERT_TRUE(now);
  EXPECT_GT(now->token, old_term.token) << "a new term";
  auto& current = follower.is_leader() ? follower : *leader;
  EXPECT_TRUE(current.health().healthy) << current.health().detail;
}

TEST_F(LeaderObservation, TheCliPrintsTheCurrentLeader) {
  auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv{DBLOCK_CLI_PATH, "--dsn", dsn_, "leader"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto outcome = dblock::test::run_command(std::move(argv));
    return std::pair{outcome.exit_code, outcome.output};
  };
  auto [none_code, none] = run({"obs/cli"});
  EXPECT_EQ(none_code, 1) << none;
  EXPECT_NE(none.find("no leader of obs/cli"), std::string::npos) << none;

  dblock::LeaderElection election(store_, "obs/cli", options());
  ASSERT_TRUE(eventually([&] { return election.is_leader(); }));
  auto [code, text] = run({"obs/cli"});
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find(fmt::format("token: {}", *election.token())), std::string::npos) << text;
  EXPECT_NE(text.find(election.leader()->owner), std::string::npos) << text;
  EXPECT_NE(text.find("since: "), std::string::npos) << text;
  auto [json_code, json] = run({"obs/cli", "--json"});
  EXPECT_EQ(json_code, 0) << json;
  EXPECT_NE(json.find(fmt::format("\"token\":{}", *election.token())), std::string::npos) << json;
}

}  // namespace
