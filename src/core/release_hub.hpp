#pragma once
// One listening session per Store, driven by one thread, that turns release notifications into
// wake-ups of waiting threads. A release wakes one waiter of that name in this process (the
// oldest), so a hot name does not cause a thundering herd of failing acquire statements; a fair
// queue's release that granted a waiter of this process wakes that waiter, with its grant.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <spdlog/fwd.h>

#include "backends/notification_backend.hpp"

namespace dblock::detail {

class ReleaseHub {
 public:
  class Subscription;

  /// `notifications`: the store's notification role, nullptr when it has none (subscriptions are timers).
  ReleaseHub(NotificationBackend* notifications, std::shared_ptr<spdlog::logger> logger);
  ~ReleaseHub();
  ReleaseHub(const ReleaseHub&) = delete;
  ReleaseHub& operator=(const ReleaseHub&) = delete;

  /// Whether releases currently wake waiters (false: none on this backend, or the listener is down).
  [[nodiscard]] bool notifying();
  /// Whether a thread of this process waits for `name` now.
  [[nodiscard]] bool has_waiters(std::string_view name);

  /// Starts watching `name` and returns once releases of it will be seen (or `ready_timeout`
  /// passed: the subscription then still works, but only as a timer). `owner`: a fair-queue
  /// waiter's owner id, whose grants the hub hands it (ReleaseNotice::grant): a release that grants
  /// it wakes it alone; empty for other waiters.
  [[nodiscard]] std::unique_ptr<Subscription> subscribe(const std::string& name,
                                                        std::chrono::milliseconds ready_timeout,
                                                        std::string owner = {});

 private:
  struct Waiter {
    std::string owner;
    bool signaled = false;
    std::optional<HandedGrant> grant;  // the newest reported to it, not yet taken
  };
  struct Watched {
    std::deque<std::shared_ptr<Waiter>> waiters;  // oldest first
    bool active = false;                          // watch() done on the current listener
  };

  void run(std::stop_token stop);
  void signal_one(Watched& watched);
  void signal_all();
  /// Wakes the waiters `released` concerns; called with mutex_ held.
  void deliver(std::vector<ReleaseNotice>& released);

  NotificationBackend* notifications_;
  std::shared_ptr<spdlog::logger> logger_;
  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::map<std::string, Watched, std::less<>> watched_;
  std::vector<std::string> to_unwatch_;
  std::unique_ptr<ReleaseListener> listener_;          // used by the hub thread only, interrupt() by anyone
  ReleaseListener* listener_for_interrupt_ = nullptr;  // guarded by mutex_
  bool listener_failed_ = false;
  std::jthread thread_;

  friend class Subscription;
};

/// RAII: unsubscribes on destruction.
class ReleaseHub::Subscription {
 public:
  Subscription(ReleaseHub& hub, std::string name, std::shared_ptr<Waiter> waiter);
  ~Subscription();
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

  /// Waits until a release of the name wakes this waiter (true) or `until` passes or `stop` is
  /// requested (false).
  bool wait_until(std::chrono::steady_clock::time_point until, const std::stop_token& stop = {});
  /// Wakes the oldest other waiter of the name: a release that may admit several (a group's) or
  /// that this waiter could not use (a reader queued behind a writer) must not stop here.
  void pass_on();
  /// Wakes the first waiter subscribed after this one that is not woken yet (none: nobody). For a
  /// wake-up meant for one particular waiter (the fair queue's grantee): every waiter subscribed
  /// before this one was woken first or still has a wake-up to use, so handing it on forwards only
  /// reaches the one it is meant for, where pass_on() could bounce between two others.
  void pass_on_later();
  /// The grant a release reported for this waiter's owner since the last call, if any (it may be
  /// of an earlier wait of the owner: compare its seq).
  [[nodiscard]] std::optional<HandedGrant> take_grant();

 private:
  ReleaseHub& hub_;
  std::string name_;
  std::shared_ptr<Waiter> waiter_;
};

}  // namespace dblock::detail
