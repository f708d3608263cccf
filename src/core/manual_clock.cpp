#include "core/manual_clock.hpp"

#include <algorithm>

namespace dblock::detail {

std::shared_ptr<ManualClock::Waiter> ManualClock::join(std::function<void()> wake, bool runs_when_poked) {
  auto waiter = std::make_shared<Waiter>(std::move(wake), runs_when_poked);
  std::lock_guard lock(mutex_);
  waiter->poke_seen_ = pokes_;
  waiters_.push_back(waiter);
  return waiter;
}

void ManualClock::leave(const std::shared_ptr<Waiter>& waiter) {
  {
    std::lock_guard wake_lock(waiter->wake_mutex_);
    waiter->wake_ = nullptr;
  }
  {
    std::lock_guard lock(mutex_);
    std::erase(waiters_, waiter);
  }
  changed_.notify_all();
}

void ManualClock::retire(const std::shared_ptr<Waiter>& waiter) {
  {
    std::lock_guard lock(mutex_);
    waiter->retired_ = true;
  }
  if (retire_hook_) retire_hook_();
}

bool ManualClock::retired(std::thread::id thread) {
  std::lock_guard lock(mutex_);
  return std::ranges::any_of(
      waiters_, [&](const std::shared_ptr<Waiter>& waiter) { return waiter->retired_ && waiter->thread_ == thread; });
}

bool ManualClock::due(Waiter& waiter, time_point until) {
  bool idle = false;
  {
    std::lock_guard lock(mutex_);
    waiter.thread_ = std::this_thread::get_id();
    if (waiter.pokable_ && waiter.poke_seen_ != pokes_) {
      waiter.poke_seen_ = pokes_;
      waiter.idle_ = false;
      return true;
    }
    if (now() >= until) {
      waiter.idle_ = false;
      return true;
    }
    idle = !waiter.idle_ || waiter.idle_at_ != moves_;
    waiter.idle_ = true;
    waiter.idle_at_ = moves_;
    waiter.until_ = until;
  }
  if (idle) changed_.notify_all();
  return false;
}

void ManualClock::advance(duration by) {
  {
    std::lock_guard lock(mutex_);
    now_.fetch_add(std::max(by, duration::zero()).count());
    ++moves_;
  }
  wake_all();
}

void ManualClock::poke() {
  {
    std::lock_guard lock(mutex_);
    ++pokes_;
    ++moves_;
  }
  wake_all();
}

void ManualClock::wake_all() {
  std::vector<std::shared_ptr<Waiter>> waiters;
  {
    std::lock_guard lock(mutex_);
    waiters = waiters_;
  }
  for (auto& waiter : waiters) {
    std::lock_guard wake_lock(waiter->wake_mutex_);
    if (waiter->wake_) waiter->wake_();
  }
}

ManualClock::time_point ManualClock::next_due() {
  std::lock_guard lock(mutex_);
  auto next = time_point::max();
  for (auto& waiter : waiters_)
    if (waiter->idle_ && waiter->idle_at_ == moves_) next = std::min(next, waiter->until_);
  return next;
}

bool ManualClock::parked(std::thread::id thread) const {
  return std::find(parked_.begin(), parked_.end(), thread) != parked_.end();
}

bool ManualClock::settle(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, limit, [&] {
    return std::ranges::all_of(waiters_, [&](const std::shared_ptr<Waiter>& waiter) {
      return (waiter->idle_ && waiter->idle_at_ == moves_) || parked(waiter->thread_);
    });
  });
}

void ManualClock::park(std::thread::id thread) {
  {
    std::lock_guard lock(mutex_);
    parked_.push_back(thread);
  }
  changed_.notify_all();
}

void ManualClock::unpark(std::thread::id thread) {
  std::lock_guard lock(mutex_);
  if (auto it = std::find(parked_.begin(), parked_.end(), thread); it != parked_.end()) parked_.erase(it);
}

bool ManualClock::any_parked() {
  std::lock_guard lock(mutex_);
  return std::ranges::any_of(waiters_, [&](const std::shared_ptr<Waiter>& waiter) { return parked(waiter->thread_); });
}

}  // namespace dblock::detail
