// Releases written behind in advisory mode (ManagerOptions::write_behind_releases): PostgreSQL's
// session advisory locks and MySQL's GET_LOCK. A last release returns before its unlock; the
// owner's next try carries it, else the writer thread sends it.

#include <chrono>
#include <future>
#include <iostream>
#include <thread>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/admin.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using dblock::test::eventually;

namespace {

class AdvisoryWriteBehind : public ::testing::TestWithParam<dblock::test::BackendCase> {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_BACKEND_DSN(server_dsn_, GetParam());
    installation_ = std::make_unique<dblock::test::Installation>(GetParam(), server_dsn_);
    store_ = installation_->store();
    admin_ = &installation_->admin();
  }

  /// A long default_ttl: the watchdog checks the sessions every 20 s, never within a test.
  std::unique_ptr<dblock::LockManager> manager(bool write_behind, dblock::ManagerOptions options = {}) {
    options.mode = dblock::LockMode::advisory;
    options.default_ttl = 60s;
    options.write_behind_releases = write_behind;
    return std::make_unique<dblock::LockManager>(store_, std::move(options));
  }

  std::string server_dsn_;
  std::shared_ptr<dblock::Store> store_;
  std::unique_ptr<dblock::test::Installation> installation_;
  dblock::test::Admin* admin_ = nullptr;
};

TEST_P(AdvisoryWriteBehind, AReleaseFreesTheNameForAnotherProcessWithinABoundedTime) {
  auto a = manager(true);
  auto other = manager(false);  // its own sessions: another process, as far as the server knows
  auto held = a->try_acquire("freed");
  ASSERT_TRUE(held);
  EXPECT_FALSE(other->try_acquire("freed"));
  auto released = std::chrono::steady_clock::now();
  held->release();
  EXPECT_EQ(a->stats().written_behind, 1U) << "the release returned before its unlock";
  std::optional<dblock::Lock> taken;
  ASSERT_TRUE(eventually([&] { return (taken = other->try_acquire("freed")).has_value(); }, 5s))
      << "the writer thread must send the unlock nobody else came to send";
  EXPECT_LT(std::chrono::steady_clock::now() - released, 2s);
  EXPECT_EQ(a->stats().lost, 0U);
}

TEST_P(AdvisoryWriteBehind, TheOwnersNextTryCarriesTheUnlockAndEachGrantIsNew) {
  auto a = manager(true);
  auto other = manager(false);
  std::int64_t last_token = 0;
  for (int i = 0; i < 200; ++i) {
    auto held = a->try_acquire(i % 2 == 0 ? "carry" : "carry-too");
    ASSERT_TRUE(held) << "the owner's own unlock written behind never refuses it";
    if (i % 10 == 0) {  // a re-acquisition after a release is a new grant: a new, later token
      auto token = held->token();
      EXPECT_GT(token, last_token);
      last_token = token;
    }
    held->release();
  }
  // The writer may win the race for the session now and then; an owner coming straight back wins
  // it often enough that 200 cycles without one mean the carrying is broken.
  EXPECT_GE(a->stats().combined, 2U) << "an acquisition carried a release written behind in its statement";
  EXPECT_EQ(a->stats().written_behind, 200U);
  std::cout << "carried in the next try: " << a->stats().combined / 2 << " of 200\n";
  for (const char* name : {"carry", "carry-too"}) {
    std::optional<dblock::Lock> taken;
    EXPECT_TRUE(eventually([&] { return (taken = other->try_acquire(name)).has_value(); }, 5s)) << name;
  }
  EXPECT_EQ(a->stats().lost, 0U);
}

TEST_P(AdvisoryWriteBehind, AnotherOwnerOfTheManagerIsNotRefusedByAPendingUnlock) {
  auto a = manager(true);
  for (int i = 0; i < 30; ++i) {
    auto held = a->try_acquire("handed-over");
    ASSERT_TRUE(held);
    held->release();
    // Another thread is another owner (its own session): its try waits for the unlock's answer.
    bool taken = false;
    std::thread([&] {
      auto mine = a->try_acquire("handed-over");
      taken = mine.has_value();
    }).join();
    ASSERT_TRUE(taken) << "cycle " << i;
  }
  EXPECT_EQ(a->stats().written_behind, 60U) << "both owners' releases were written behind";
  EXPECT_EQ(a->stats().lost, 0U);
}

TEST_P(AdvisoryWriteBehind, ABrokenSessionsPendingUnlocksAreMootNotLosses) {
  std::promise<std::string> lost;
  auto a = manager(true, {.on_lost = [&](std::string_view name, std::int64_t) { lost.set_value(std::string(name)); }});
  auto other = manager(false);
  auto kept = a->try_acquire("kept");
  auto dropped = a->try_acquire("dropped");  // the same owner: the same session
  ASSERT_TRUE(kept && dropped);
  ASSERT_EQ(admin_->kill_advisory_holder("kept"), 1);  // the session dies; the watchdog has not looked yet
  EXPECT_NO_THROW(dropped->release()) << "written behind: the manager knew of nothing wrong";
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "sending the unlock finds the session broken";
  EXPECT_EQ(future.get(), "kept");
  EXPECT_TRUE(kept->lost());
  EXPECT_EQ(a->stats().lost, 1U) << "the released lock is no loss: the server let it go with the connection";
  EXPECT_TRUE(other->try_acquire("dropped"));
  EXPECT_TRUE(other->try_acquire("kept"));
  EXPECT_TRUE(a->try_acquire("again")) << "the owner goes on with a fresh session";
}

TEST_P(AdvisoryWriteBehind, DestroyingTheManagerSendsWhatIsPending) {
  auto other = manager(false);
  {
    auto a = manager(true);
    for (const char* name : {"last-1", "last-2", "last-3"}) {
      auto held = a->try_acquire(name);
      ASSERT_TRUE(held);
      held->release();
    }
    EXPECT_EQ(a->stats().written_behind, 3U);
  }
  for (const char* name : {"last-1", "last-2", "last-3"})
    EXPECT_TRUE(other->try_acquire(name)) << name << ": free once the manager is gone";
}

INSTANTIATE_TEST_SUITE_P(Backends, AdvisoryWriteBehind,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresAdvisory,
                                                                  dblock::test::kMysqlAdvisory})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
