// The release hub's policy over a scripted listener: a plain release wakes the oldest waiter of the
// name in this process; a fair queue's release that granted one of this process's waiters wakes that
// waiter alone, with its grant, and its release's plain notice (which follows it) wakes nobody else.

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

#include "core/release_hub.hpp"

namespace {

using namespace std::chrono_literals;
using dblock::detail::HandedGrant;
using dblock::detail::ReleaseNotice;

/// Hands the hub the batches a test queues, one per wait(), as a listening session would.
class ScriptedNotices {
 public:
  void push(std::vector<ReleaseNotice> batch) {
    {
      std::lock_guard lock(mutex_);
      batches_.push_back(std::move(batch));
    }
    changed_.notify_all();
  }
  std::vector<ReleaseNotice> next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return !batches_.empty() || interrupted_; });
    interrupted_ = false;
    if (batches_.empty()) return {};
    auto batch = std::move(batches_.front());
    batches_.pop_front();
    return batch;
  }
  void interrupt() {
    {
      std::lock_guard lock(mutex_);
      interrupted_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::vector<ReleaseNotice>> batches_;
  bool interrupted_ = false;
};

class ScriptedListener final : public dblock::detail::ReleaseListener {
 public:
  explicit ScriptedListener(std::shared_ptr<ScriptedNotices> notices) : notices_(std::move(notices)) {}
  void watch(std::string_view) override {}
  void unwatch(std::string_view) override {}
  std::vector<ReleaseNotice> wait(std::chrono::milliseconds timeout) override { return notices_->next(timeout); }
  void interrupt() noexcept override { notices_->interrupt(); }

 private:
  std::shared_ptr<ScriptedNotices> notices_;
};

class ScriptedNotifications final : public dblock::detail::NotificationBackend {
 public:
  explicit ScriptedNotifications(std::shared_ptr<ScriptedNotices> notices) : notices_(std::move(notices)) {}
  std::unique_ptr<dblock::detail::ReleaseListener> listen() override {
    return std::make_unique<ScriptedListener>(notices_);
  }

 private:
  std::shared_ptr<ScriptedNotices> notices_;
};

ReleaseNotice plain(std::string name) { return {std::move(name), std::nullopt}; }
ReleaseNotice granted(std::string name, std::string owner, std::int64_t seq, std::int64_t token) {
  return {std::move(name), HandedGrant{std::move(owner), seq, token}};
}

struct Hub {
  std::shared_ptr<ScriptedNotices> notices = std::make_shared<ScriptedNotices>();
  ScriptedNotifications backend{notices};
  dblock::detail::ReleaseHub hub{
      &backend, std::make_shared<spdlog::logger>("hub", std::make_shared<spdlog::sinks::null_sink_mt>())};
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
  h.notices->push({granted("n", "owner-2", 7, 9), plain("n")});
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
  // Granted to a waiter of another process, then (a batch later) a marker release of another name:
  // once the marker's waiter is woken, the grant's batch has been delivered.
  h.notices->push({granted("n", "owner-of-another-process", 3, 4), plain("n")});
  h.notices->push({plain("m")});
  ASSERT_TRUE(marker->wait_until(std::chrono::steady_clock::now() + 10s));
  EXPECT_FALSE(woken_now(*first)) << "nobody here was granted, and the name is held again";
  EXPECT_FALSE(woken_now(*second));
  h.notices->push({plain("n")});
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
  h.notices->push({granted("n", "owner-2", 5, 6), plain("other"), plain("n")});
  ASSERT_TRUE(second->wait_until(std::chrono::steady_clock::now() + 10s));
  EXPECT_TRUE(first->wait_until(std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ(second->take_grant()->token, 6);
}

}  // namespace
