#pragma once
// One turn (the right to run a step alone), handed on in the order the waiters came: a newcomer
// never passes a waiter, so no waiter is starved by a stream of newcomers, as it can be behind a
// std::mutex. A waiter lives on its own stack until it is handed the turn or gives up waiting.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <variant>

namespace dblock::detail {

/// Not synchronised itself: every call is made holding the one mutex its owner guards it with.
/// `Tag` is what a waiter carries for the one who hands it the turn.
template <class Tag = std::monostate>
class FifoTurn {
 public:
  struct Waiter {
    std::condition_variable handed;
    bool holds = false;
    Tag tag{};
  };

  /// Takes the turn if nobody holds it.
  [[nodiscard]] bool try_take() noexcept {
    if (held_) return false;
    held_ = true;
    return true;
  }

  /// Queues `me` behind the waiters already there. @throws std::bad_alloc, queuing nothing.
  void queue(Waiter& me) { waiters_.push_back(&me); }

  /// Waits, releasing `lock` meanwhile, until `me` (queued) is handed the turn.
  void wait(std::unique_lock<std::mutex>& lock, Waiter& me) {
    me.handed.wait(lock, [&] { return me.holds; });
  }

  /// As wait(), for at most `timeout`; false when it passed, and `me` has then left the queue.
  bool wait_for(std::unique_lock<std::mutex>& lock, Waiter& me, std::chrono::milliseconds timeout) {
    if (me.handed.wait_for(lock, timeout, [&] { return me.holds; })) return true;
    std::erase(waiters_, &me);
    return false;
  }

  /// Ends the holder's turn: hands it to the first waiter, running `before_wake(its tag)` before
  /// it is woken, or frees it when nobody waits.
  template <class BeforeWake>
  void hand_on(BeforeWake&& before_wake) {
    if (waiters_.empty()) {
      held_ = false;
      return;
    }
    Waiter* next = waiters_.front();
    waiters_.pop_front();
    next->holds = true;
    before_wake(next->tag);
    next->handed.notify_one();
  }
  void hand_on() {
    hand_on([](const Tag&) {});
  }

 private:
  bool held_ = false;
  std::deque<Waiter*> waiters_;  // first come, first handed the turn
};

}  // namespace dblock::detail
