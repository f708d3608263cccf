#pragma once
// Releases written behind (ManagerOptions::write_behind_releases): a last-level release that finds
// another release statement of its manager out does not wait for a statement of its own. It is
// queued and its caller goes on; one thread per manager sends what queued, together, as soon as
// it has any (beside at most one release its caller sends). A lone release is still sent by its caller (admit() says
// so), so a release costs no thread hop unless it would have waited anyway.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <dblock/errors.hpp>

#include "core/park_hooks.hpp"

namespace dblock::detail {

/// Starts the writer's thread. Out of line, and on a plain function pointer: a thread started on a
/// lambda in this header would make the shared library export its type (typeinfo and vtable of the
/// thread's state, named after this internal class).
std::thread start_writer_thread(void (*run)(void*), void* self);

/// Thread-safe. `Item` is a std::shared_ptr to something with a `name`.
template <class Item>
class WriteBehind {
 public:
  /// Runs on the writer's thread with distinct names sorted by bytes (the lock order of every
  /// statement that locks several rows); handles every failure itself (it cannot throw to anyone)
  /// and runs no user code (a callback there could end the manager on the thread it joins).
  using Send = std::function<void(const std::vector<Item>&)>;

  WriteBehind(std::size_t max_batch, std::chrono::milliseconds wait_limit, Send send)
      : max_batch_(std::max<std::size_t>(max_batch, 1)), wait_limit_(wait_limit), send_(std::move(send)) {
    thread_ = start_writer_thread(&WriteBehind::run_on, this);
  }
  /// Sends everything still queued, then stops the thread.
  ~WriteBehind() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;

  /// Queues `item` and returns true when a release statement is out or queued already; otherwise
  /// returns false and counts the caller's own statement as out until it calls sent().
  /// `on_queued` runs once `item` is queued and before the writer can take it (so before anything
  /// its statement finds); it must neither block nor throw.
  template <class OnQueued>
  bool admit(const Item& item, OnQueued&& on_queued) {
    std::lock_guard lock(mutex_);
    if (out_ == 0 && queue_.empty()) {
      ++out_;
      return false;
    }
    // Pending before queued: the writer erases what it sends from pending_, so a queued item must
    // be there (an allocation that fails leaves neither).
    auto pending = pending_.insert(item->name);
    try {
      queue_.push_back(item);
    } catch (...) {
      pending_.erase(pending);
      throw;
    }
    std::forward<OnQueued>(on_queued)();
    changed_.notify_all();
    return true;
  }
  [[nodiscard]] std::thread::id thread_id() const noexcept { return thread_.get_id(); }

  /// The caller's own statement (admit() returned false) has returned.
  void sent() {
    std::lock_guard lock(mutex_);
    --out_;
  }

  /// Waits until no release of `name` is queued or out on the writer's thread: an acquisition
  /// through this manager must find the row its release deletes gone. @throws ConnectionError when
  /// the release is still out after the wait limit (then nothing was sent for the caller).
  void wait_for(std::string_view name) {
    std::unique_lock lock(mutex_);
    if (!pending_.contains(name)) return;
    auto deadline = std::chrono::steady_clock::now() + wait_limit_;
    Waiter& me = waiters_.emplace_back(Waiter{std::string(name), park_hooks});
    auto forget_me = [&] { waiters_.remove_if([&](const Waiter& w) { return &w == &me; }); };
    while (pending_.contains(name)) {
      if (me.hooks != nullptr && me.hooks->parked) me.hooks->parked();
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && pending_.contains(name)) {
        forget_me();
        throw ConnectionError(fmt::format(
            "the release of this name written behind by this manager was still out after {} ms (the database is "
            "slow or unreachable); nothing was sent",
            wait_limit_.count()));
      }
    }
    forget_me();
  }

 private:
  struct Waiter {
    std::string name;
    const ParkHooks* hooks;
  };

  static void run_on(void* self) { static_cast<WriteBehind*>(self)->run(); }

  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::vector<Item> batch = take_batch();
      ++out_;
      lock.unlock();
      std::sort(batch.begin(), batch.end(), [](const Item& a, const Item& b) { return a->name < b->name; });
      send_(batch);
      lock.lock();
      --out_;
      for (const Item& item : batch) pending_.erase(pending_.find(item->name));
      // The model test's scheduler must see a parked caller run again before it is woken.
      for (const Waiter& waiter : waiters_)
        if (!pending_.contains(waiter.name) && waiter.hooks != nullptr && waiter.hooks->resumed)
          waiter.hooks->resumed();
      changed_.notify_all();
    }
  }

  /// In queue order, up to max_batch, a name at most once (a second release of a name, by another
  /// owner, goes in the next batch); takes them off the queue. REQUIRES: mutex_ held.
  std::vector<Item> take_batch() {
    std::vector<Item> batch;
    for (auto it = queue_.begin(); it != queue_.end() && batch.size() < max_batch_;) {
      bool fresh = std::none_of(batch.begin(), batch.end(), [&](const Item& in) { return in->name == (*it)->name; });
      if (fresh) {
        batch.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    return batch;
  }

  const std::size_t max_batch_;
  const std::chrono::milliseconds wait_limit_;
  Send send_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> queue_;
  std::multiset<std::string, std::less<>> pending_;  // names queued or out on the writer's thread
  std::list<Waiter> waiters_;                        // acquisitions waiting for one of them
  std::size_t out_ = 0;                              // release statements out: callers' and the writer's
  bool stopping_ = false;
  std::thread thread_;  // last: starts once everything it uses is there
};

}  // namespace dblock::detail
