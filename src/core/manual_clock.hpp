#pragma once
// dblock::testing's local clock: steady time that moves only when the test moves it. A Store opened
// with one (StoreParts::manual_clock; production stores have none) makes its table-mode managers
// read it instead of std::chrono::steady_clock for all that a lease's belief rests on: a grant's
// local deadline, Lock::lost(), the deadline timer and the watchdog's rounds. Their two threads wait
// for its time instead of the machine's, and report to it when they are idle, so that the test's
// advance() returns only once every consequence of the move has run (settle()).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <dblock/export.hpp>

namespace dblock::detail {

class DBLOCK_EXPORT ManualClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  /// One thread of a manager that waits for this clock's time (its watchdog, its deadline timer).
  class Waiter {
   public:
    Waiter(std::function<void()> wake, bool runs_when_poked) : wake_(std::move(wake)), pokable_(runs_when_poked) {}

   private:
    friend class ManualClock;
    std::mutex wake_mutex_;
    std::function<void()> wake_;  // guarded by wake_mutex_; emptied by leave()
    const bool pokable_;
    // Guarded by the clock's mutex_.
    std::thread::id thread_;
    bool idle_ = false;
    std::uint64_t idle_at_ = 0;  // the clock's move the thread was idle at
    time_point until_{};
    std::uint64_t poke_seen_ = 0;
    bool retired_ = false;
  };

  explicit ManualClock(time_point start) : now_(start.time_since_epoch().count()) {}

  [[nodiscard]] time_point now() const noexcept { return time_point(duration(now_.load())); }

  /// Registers a waiting thread. `wake` notifies the condition variable the thread waits on, under
  /// the mutex it waits with (so that no move is missed); it is called with no lock of the clock
  /// held. `runs_when_poked`: poke() makes this thread run a round at once (the watchdog).
  std::shared_ptr<Waiter> join(std::function<void()> wake, bool runs_when_poked);
  /// Unregisters it: `wake` is not called again once this returns.
  void leave(const std::shared_ptr<Waiter>& waiter);
  /// Its manager is ending and will join the thread: whatever holds the thread for the test (a
  /// stalled statement) must let it go. Runs the retire hook (set_retire_hook).
  void retire(const std::shared_ptr<Waiter>& waiter);
  /// Whether `thread` is a waiter's whose manager is ending (retire).
  [[nodiscard]] bool retired(std::thread::id thread);
  /// Called by retire(), with no lock of the clock held (dblock::testing wakes its stalls). Set
  /// before any waiter joins.
  void set_retire_hook(std::function<void()> hook) { retire_hook_ = std::move(hook); }

  /// For the waiting thread, inside its wait's predicate: true when `until` has come (or a poke
  /// asks it to run); else it is recorded as idle until `until` at the clock's latest move.
  bool due(Waiter& waiter, time_point until);

  /// The test's side. Moves the time forward by `by` and wakes every waiter.
  void advance(duration by);
  /// Asks every thread that runs when poked to run a round now, and wakes it.
  void poke();
  /// The earliest time an idle waiter waits for (time_point::max() when none).
  [[nodiscard]] time_point next_due();
  /// Blocks until every waiter is idle since the latest move or poke, or parked, for at most
  /// `limit` of real time. False when that did not happen within it.
  bool settle(std::chrono::milliseconds limit);
  /// Whether a thread is blocked by the test (a stalled statement); it counts as settled meanwhile.
  void park(std::thread::id thread);
  void unpark(std::thread::id thread);
  /// Whether any waiter's thread is parked.
  [[nodiscard]] bool any_parked();

 private:
  void wake_all();
  [[nodiscard]] bool parked(std::thread::id thread) const;  // mutex_ held

  std::atomic<duration::rep> now_;
  std::mutex mutex_;
  std::condition_variable changed_;               // a waiter went idle, left or was parked
  std::uint64_t moves_ = 0;                       // guarded by mutex_: advances and pokes
  std::uint64_t pokes_ = 0;                       // guarded by mutex_
  std::vector<std::shared_ptr<Waiter>> waiters_;  // guarded by mutex_
  std::vector<std::thread::id> parked_;           // guarded by mutex_
  std::function<void()> retire_hook_;             // set before any waiter joins
};

}  // namespace dblock::detail
