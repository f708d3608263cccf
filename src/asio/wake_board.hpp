#pragma once
// The asynchronous waiters of one AsyncLockManager, queued by name, oldest first, and what wakes
// them: PostgreSQL's release notifications, read by one listening session on a thread of its own
// (the same LISTEN the synchronous waiters use), or else this manager's own releases. A release
// wakes the oldest waiter not yet woken; the oldest waiter of each name (the poller) also tries on
// a timer, for releases no one reports (another process's, on backends without notifications) and
// leases that end unreleased. The others wait for a wake-up at no cost but their deadline's timer.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <spdlog/fwd.h>

#include "backends/notification_backend.hpp"

namespace dblock::detail {

class WakeBoard {
 public:
  /// A waiting operation. Called without any lock of the board held.
  class Waiter {
   public:
    virtual ~Waiter() = default;
    /// A release of the name (or a reason to look again): try now.
    virtual void wake() = 0;
    /// It became its name's poller: arm the polling timer.
    virtual void promote() = 0;
  };

  /// `notifications`: the store's notification role, listened to when it offers a listener; null:
  /// never (no such role, or advisory mode).
  WakeBoard(NotificationBackend* notifications, std::shared_ptr<spdlog::logger> logger);
  ~WakeBoard();
  /// Stops listening for the database's notifications and waits for the listener to end; the
  /// backend is not touched afterwards. Local wake-ups go on working. Idempotent.
  void stop_listening();
  WakeBoard(const WakeBoard&) = delete;
  WakeBoard& operator=(const WakeBoard&) = delete;

  void enter(const std::string& name, std::shared_ptr<Waiter> waiter);
  /// `used`: the waiter was granted the name, so a wake-up it got is spent; otherwise it is handed
  /// to the next waiter. The next oldest becomes the poller when this one was.
  void leave(const std::string& name, const Waiter* waiter, bool used);
  /// The waiter's try after a wake-up failed: the wake-up is spent.
  void rest(const std::string& name, const Waiter* waiter);
  [[nodiscard]] bool is_poller(const std::string& name, const Waiter* waiter);
  /// A release of `name`: wakes its oldest waiter not woken yet.
  void released(std::string_view name);
  /// Wakes the oldest other waiter (a grant that others may share: a group's place).
  void pass_on(const std::string& name, const Waiter* waiter);
  /// Release notifications arrive now (so local releases need not wake anyone themselves).
  [[nodiscard]] bool notifying();

 private:
  struct Entry {
    std::shared_ptr<Waiter> waiter;
    bool woken = false;
  };
  struct Queue {
    std::deque<Entry> entries;  // oldest first
    bool watched = false;       // the listener reports it
  };

  /// Marks the oldest not-woken entry other than `except` and returns its waiter.
  static std::shared_ptr<Waiter> pick(Queue& queue, const Waiter* except);
  void listen(std::stop_token stop);

  NotificationBackend* notifications_;
  std::shared_ptr<spdlog::logger> logger_;
  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::map<std::string, Queue, std::less<>> queues_;
  std::vector<std::string> to_unwatch_;
  ReleaseListener* listener_ = nullptr;  // for interrupt(); guarded by mutex_
  bool notifying_ = false;
  std::jthread thread_;
};

}  // namespace dblock::detail
