#pragma once
// The statement hook through which a TestStore injects a test's faults (busy, error, disconnect,
// a lost reply, a stall) into the statements it names, and hands a name over in steal(). Internal
// to dblock::testing (not a public header).

#include <dblock/testing.hpp>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "backends/backend_seams.hpp"
#include "core/manual_clock.hpp"

namespace dblock::testing {

/// The faults a test injected, met by statements on whatever thread runs them.
class FaultHook final : public detail::StatementHook {
 public:
  explicit FaultHook(std::shared_ptr<detail::ManualClock> clock) : clock_(std::move(clock)) {}

  /// Applies the first pending fault whose statements include `what`; a stall waits here until
  /// unstalled, its manager ends, or the store closes.
  detail::StatementFault before(std::string_view what) override;

  /// Wakes the stalled statements to look whether their manager ends (ManualClock::retire).
  void wake_stalls() {
    { std::lock_guard lock(mutex_); }  // a stall between its check and its wait sees the wake-up
    stall_changed_.notify_all();
  }

  void add(Statements which, Fault fault, int times) {
    if (times <= 0) return;
    std::lock_guard lock(mutex_);
    pending_.push_back({which, fault, times});
  }
  void clear() {
    std::lock_guard lock(mutex_);
    pending_.clear();
  }
  /// Lets every stalled statement go and waits until their threads have left the hook.
  void release_all(bool closing) {
    std::unique_lock lock(mutex_);
    ++releases_;
    closing_ = closing_ || closing;
    stall_changed_.notify_all();
    stall_changed_.wait(lock, [&] { return stalled_ == 0; });
  }
  /// Only the calling thread acquires until end_hand_over().
  void begin_hand_over() {
    std::lock_guard lock(mutex_);
    handing_over_ = std::this_thread::get_id();
  }
  void end_hand_over() {
    {
      std::lock_guard lock(mutex_);
      handing_over_.reset();
    }
    stall_changed_.notify_all();
  }
  [[nodiscard]] int stalled() const {
    std::lock_guard lock(mutex_);
    return stalled_;
  }

 private:
  struct Pending {
    Statements which;
    Fault fault;
    int times;
  };
  std::shared_ptr<detail::ManualClock> clock_;
  mutable std::mutex mutex_;
  std::condition_variable stall_changed_;
  std::deque<Pending> pending_;                  // guarded by mutex_
  std::uint64_t releases_ = 0;                   // guarded by mutex_
  int stalled_ = 0;                              // guarded by mutex_
  bool closing_ = false;                         // guarded by mutex_
  std::optional<std::thread::id> handing_over_;  // guarded by mutex_: steal() in progress
};

}  // namespace dblock::testing
