// The release hub's policy over a scripted listener: a plain release wakes the oldest waiter of the
// name in this process; a fair queue's release that granted one of this process's waiters wakes that
// waiter alone, with its grant, and its release's plain notice (which follows it) wakes nobody else.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

#include "core/release_hub.hpp"
#include "support/scripted_backend.hpp"

namespace {

using namespace std::chrono_literals;
using dblock::detail::HandedGrant;
using dblock::detail::ReleaseNotice;

ReleaseNotice plain(std::string name) { return {std::move(name), std::nullopt}; }
ReleaseNotice granted(std::string name, std::string owner, std::int64_t seq, std::int64_t token) {
  return {std::move(name), HandedGrant{std::move(owner), seq, token}};
}

/// A hub over the scripted notification role (scripted_backend.hpp); `hear` queues notices as one
/// listening session's read would return them.
struct Hub {
  std::shared_ptr<dblock_test::Script> script = [] {
    auto script = std::make_shared<dblock_test::Script>();
    script->notices_on = true;
    return script;
  }();
  dblock_test::ScriptedNotifications backend{script};
  dblock::detail::ReleaseHub hub{
      &backend, std::make_shared<spdlog::logger>("hub", std::make_shared<spdlog::sinks::null_sink_mt>())};
  void hear(std::vector<ReleaseNotice> notices) {
    {
      std::lock_guard lock(script->notice_mutex);
      for (auto& notice : notices) script->notices.push_back(std::move(notice));
    }
    script->notice_changed.notify_all();
  }
};

/// Whether `subscription` has a wake-up now, without waiting for one.
bool woken_now(dblock::detail::ReleaseHub::Subscription& subscription) {
  return subscription.wait_until(std::chrono::steady_clock::now());
}

TEST(ReleaseHub, AGrantWakesItsWaiterAloneWithItsGrantAndItsPlainNoticeWakesNobodyElse) {
  Hub h;
  auto first = h.hub.subscribe("n", 5s, "owner-1");
  auto second = h.hub.subscribe("n", 5s, "owner-2");
  auto plain_waiter = h.hub.subscribe("n", 5s);
  ASSERT_TRUE(h.hub.notifying());
  h.hear({granted("n", "owner-2", 7, 9), plain("n")});
  ASSERT_TRUE(second->wait_until(std::chrono::steady_clock::now() + 10s)) << "the grantee is woken";
  auto grant = second->take_grant();
  ASSERT_TRUE(grant);
  EXPECT_EQ(grant->owner, "owner-2");
  EXPECT_EQ(grant->seq, 7);
  EXPECT_EQ(grant->token, 9);
  EXPECT_FALSE(second->take_grant()) << "a grant is taken once";
  // The batch was delivered under one hold of the hub's mutex before the grantee was woken.
  EXPECT_FALSE(woken_now(*first)) << "the oldest waiter is not woken by a release that granted another";
  EXPECT_FALSE(woken_now(*plain_waiter));
  EXPECT_FALSE(first->take_grant());
}

TEST(ReleaseHub, APlainReleaseWakesTheOldestWaiterAndAGrantElsewhereWakesNone) {
  Hub h;
  auto first = h.hub.subscribe("n", 5s, "owner-1");
  auto second = h.hub.subscribe("n", 5s, "owner-2");
  auto marker = h.hub.subscribe("m", 5s);
  // Granted to a waiter of another process, then a marker release of another name: once the
  // marker's waiter is woken, the grant's notices have been delivered.
  h.hear({granted("n", "owner-of-another-process", 3, 4), plain("n")});
  h.hear({plain("m")});
  ASSERT_TRUE(marker->wait_until(std::chrono::steady_clock::now() + 10s));
  EXPECT_FALSE(woken_now(*first)) << "nobody here was granted, and the name is held again";
  EXPECT_FALSE(woken_now(*second));
  h.hear({plain("n")});
  ASSERT_TRUE(first->wait_until(std::chrono::steady_clock::now() + 10s)) << "a plain release wakes the oldest";
  EXPECT_FALSE(first->take_grant()) << "and hands it no grant";
  EXPECT_FALSE(woken_now(*second));
}

TEST(ReleaseHub, APlainNoticeOfAnotherReleaseAfterAGrantStillWakesTheOldest) {
  Hub h;
  auto first = h.hub.subscribe("n", 5s, "owner-1");
  auto second = h.hub.subscribe("n", 5s, "owner-2");
  // The grant's own plain notice came in an earlier batch (or was never sent: a grant the listener
  // heard alone); a plain notice that does not follow the grant is another release's, and wakes.
  h.hear({granted("n", "owner-2", 5, 6), plain("other"), plain("n")});
  ASSERT_TRUE(second->wait_until(std::chrono::steady_clock::now() + 10s));
  EXPECT_TRUE(first->wait_until(std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ(second->take_grant()->token, 6);
}

}  // namespace
