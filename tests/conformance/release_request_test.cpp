// Asking a holder to let go (Store::request_release, `dblock release --ask`, `dblock run
// --ask-signal`) on every backend in table mode: the holder hears it at its next renewal, once per
// grant, and keeps its lock (renewed) until it releases; a later grant of the name is not asked;
// nothing but a live exclusive holder can be asked.

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/cli_case.hpp"
#include "support/eventually.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

/// What a manager's on_release_requested heard, and its renewal cycles.
struct Heard {
  std::mutex mutex;
  std::vector<std::pair<std::string, std::int64_t>> asked;
  std::atomic<int> renewals{0};

  dblock::ManagerOptions options() {
    // A 3 s lease renewed every 300 ms: an asked row left unrenewed would be past half of its
    // lease after six renewals of the others.
    return {.default_ttl = 3s,
            .renew_interval = 300ms,
            .on_release_requested =
                [this](std::string_view name, std::int64_t token) {
                  std::lock_guard lock(mutex);
                  asked.emplace_back(name, token);
                },
            .on_event =
                [this](const dblock::LockEvent& event) {
                  if (event.kind == dblock::LockEventKind::renewed) ++renewals;
                }};
  }
  std::size_t count() {
    std::lock_guard lock(mutex);
    return asked.size();
  }
  /// Waits for `cycles` more renewal cycles than have run now.
  bool renewed_again(int cycles) {
    int from = renewals.load();
    return dblock::test::eventually([&] { return renewals.load() >= from + cycles; }, 20s);
  }
};

class ReleaseRequest : public dblock::test::CliCaseTest {};

TEST_P(ReleaseRequest, TheHolderHearsItAtItsNextRenewalOncePerGrantAndKeepsItsLockRenewedUntilItReleases) {
  Heard heard;
  auto a = manager(heard.options());
  auto held = a->try_acquire("asked");
  auto beside = a->try_acquire("beside");  // renewed in the same statement, never asked
  ASSERT_TRUE(held && beside);
  auto asked = store_->request_release("asked");
  ASSERT_TRUE(asked);
  EXPECT_EQ(asked->token, held->token());
  EXPECT_EQ(asked->state, dblock::LockState::held) << "asking takes nothing";
  EXPECT_TRUE(store_->request_release("asked")) << "asking twice is asking once, and says so alike";

  ASSERT_TRUE(dblock::test::eventually([&] { return heard.count() > 0; })) << "told at its next renewal";
  EXPECT_TRUE(held->release_requested());
  EXPECT_FALSE(beside->release_requested());
  ASSERT_TRUE(heard.renewed_again(6));
  {
    std::lock_guard lock(heard.mutex);
    ASSERT_EQ(heard.asked.size(), 1U) << "once per grant, however many renewals find it asked";
    EXPECT_EQ(heard.asked[0].first, "asked");
    EXPECT_EQ(heard.asked[0].second, held->token());
  }
  EXPECT_FALSE(held->lost());
  auto row = this->row("asked");
  ASSERT_TRUE(row);
  EXPECT_GT(row->remaining, 1500ms) << "an asked lock is still renewed";
  auto b_heard = std::make_unique<Heard>();
  auto b = manager(b_heard->options());
  EXPECT_FALSE(b->try_acquire("asked")) << "the asked holder keeps its lock until it releases";

  held->release();
  auto next = b->try_acquire("asked");
  ASSERT_TRUE(next);
  ASSERT_TRUE(b_heard->renewed_again(2));
  EXPECT_FALSE(next->release_requested()) << "the request was for the grant before";
  EXPECT_EQ(b_heard->count(), 0U);
  ASSERT_TRUE(store_->request_release("asked"));
  ASSERT_TRUE(dblock::test::eventually([&] { return next->release_requested(); }));
  EXPECT_EQ(b_heard->count(), 1U);
  EXPECT_EQ(heard.count(), 1U) << "the first holder's manager is not told of another's grant";
}

TEST_P(ReleaseRequest, OnlyALiveExclusiveHolderCanBeAskedAndTheCliSaysWhich) {
  auto a = manager({.default_ttl = 20s});
  EXPECT_FALSE(store_->request_release("nobody"));
  auto permit = a->try_acquire("permits", {.permits = 2});
  ASSERT_TRUE(permit);
  EXPECT_FALSE(store_->request_release("permits")) << "a group's members are not asked";
  auto revoked = a->try_acquire("revoked");
  ASSERT_TRUE(revoked);
  ASSERT_TRUE(store_->revoke("revoked"));
  EXPECT_FALSE(store_->request_release("revoked"));
  EXPECT_THROW((void)store_->request_release(""), dblock::InvalidArgument);

  auto held = a->try_acquire("held\x1b[2J");
  ASSERT_TRUE(held);
  auto told = cli({"release", "--ask", "held\x1b[2J"});
  EXPECT_EQ(told.exit_code, 0) << told.output;
  EXPECT_NE(told.output.find(fmt::format("(token {}) to let go of 'held\\x1b[2J'", held->token())), std::string::npos)
      << told.output;
  EXPECT_EQ(told.output.find('\x1b'), std::string::npos) << "no raw control character: " << told.output;
  auto nothing = cli({"release", "--ask", "permits"});
  EXPECT_EQ(nothing.exit_code, 1) << nothing.output;
  EXPECT_NE(nothing.output.find("no live lock named 'permits' whose holder can be asked"), std::string::npos)
      << nothing.output;
  EXPECT_EQ(cli({"release", "--ask", "--force", "held"}).exit_code, 64) << "asking is not breaking";
  EXPECT_EQ(row("held\x1b[2J")->state, dblock::LockState::held);
}

TEST_P(ReleaseRequest, RunSendsItsCommandTheAskSignalAndWithoutOneSaysTheCommandGoesOn) {
  // 6 s leases: the wrappers must keep their leases while the test waits for events on a loaded
  // machine (2 s leases were lost there in the revocation tests).
  auto started = dir_ / "started", asked = dir_ / "asked";
  auto holder =
      start_cli({"run", "--name", "job", "--ttl", "6s", "--ask-signal", "USR1", "--", "sh", "-c",
                 "trap 'touch " + asked.string() + "; exit 0' USR1; touch " + started.string() + "; sleep 30 & wait"});
  ASSERT_TRUE(dblock::test::eventually([&] { return std::filesystem::exists(started); })) << holder.output();
  auto told = cli({"release", "--ask", "job"});
  EXPECT_EQ(told.exit_code, 0) << told.output;
  auto ended = holder.finish();
  EXPECT_EQ(ended.exit_code, 0) << "the command let go when asked: " << ended.output;
  EXPECT_TRUE(std::filesystem::exists(asked)) << ended.output;
  EXPECT_NE(ended.output.find("sending the command SIGUSR1"), std::string::npos) << ended.output;
  EXPECT_FALSE(row("job")) << "released";

  auto plain_started = dir_ / "plain";
  auto plain = start_cli({"run", "--name", "plain", "--ttl", "6s", "--", "sh", "-c",
                          "touch " + plain_started.string() + "; sleep 30 & wait"});
  ASSERT_TRUE(dblock::test::eventually([&] { return std::filesystem::exists(plain_started); })) << plain.output();
  EXPECT_EQ(cli({"release", "--ask", "plain"}).exit_code, 0);
  EXPECT_TRUE(
      dblock::test::eventually([&] { return plain.output().find("the command goes on") != std::string::npos; }, 20s))
      << plain.output();
  EXPECT_TRUE(row("plain")) << "still held: nobody told the command";
  EXPECT_EQ(cli({"release", "--force", "plain"}).exit_code, 0);
  EXPECT_EQ(plain.finish().exit_code, 70);
  EXPECT_EQ(cli({"run", "--name", "x", "--ask-signal", "KILL", "--", "true"}).exit_code, 64);
  EXPECT_EQ(cli({"run", "--name", "x", "--mode", "advisory", "--ask-signal", "TERM", "--", "true"}).exit_code, 64);
}

INSTANTIATE_TEST_SUITE_P(Backends, ReleaseRequest,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kSqlite,
                              dblock::test::kPgBouncerTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
