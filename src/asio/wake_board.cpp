#include "asio/wake_board.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace dblock::detail {

namespace {
constexpr std::chrono::milliseconds kListenSlice{1000};
constexpr std::chrono::milliseconds kReconnectDelay{200};
}  // namespace

WakeBoard::WakeBoard(NotificationBackend* notifications, std::shared_ptr<spdlog::logger> logger)
    : notifications_(notifications), logger_(std::move(logger)) {
  if (notifications_ != nullptr) thread_ = std::jthread([this](std::stop_token stop) { listen(std::move(stop)); });
}

WakeBoard::~WakeBoard() { stop_listening(); }

void WakeBoard::stop_listening() {
  thread_.request_stop();
  {
    std::lock_guard lock(mutex_);
    if (listener_ != nullptr) listener_->interrupt();
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WakeBoard::enter(const std::string& name, std::shared_ptr<Waiter> waiter) {
  std::lock_guard lock(mutex_);
  queues_[name].entries.push_back(Entry{std::move(waiter)});
  if (listener_ != nullptr) listener_->interrupt();  // the listener's watch list changed
}

std::shared_ptr<WakeBoard::Waiter> WakeBoard::pick(Queue& queue, const Waiter* except) {
  for (auto& entry : queue.entries) {
    if (entry.woken || entry.waiter.get() == except) continue;
    entry.woken = true;
    return entry.waiter;
  }
  return nullptr;
}

void WakeBoard::leave(const std::string& name, const Waiter* waiter, bool used) {
  std::shared_ptr<Waiter> to_wake, to_promote;
  {
    std::lock_guard lock(mutex_);
    auto it = queues_.find(name);
    if (it == queues_.end()) return;
    auto& entries = it->second.entries;
    auto at = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.waiter.get() == waiter; });
    if (at == entries.end()) return;
    bool was_poller = at == entries.begin();
    bool hand_on = at->woken && !used;
    entries.erase(at);
    if (entries.empty()) {
      if (it->second.watched) to_unwatch_.push_back(name);
      queues_.erase(it);
      if (listener_ != nullptr) listener_->interrupt();
    } else {
      if (hand_on) to_wake = pick(it->second, nullptr);
      if (was_poller && entries.front().waiter != to_wake) to_promote = entries.front().waiter;
    }
  }
  if (to_wake) to_wake->wake();
  if (to_promote) to_promote->promote();
}

void WakeBoard::rest(const std::string& name, const Waiter* waiter) {
  std::lock_guard lock(mutex_);
  auto it = queues_.find(name);
  if (it == queues_.end()) return;
  for (auto& entry : it->second.entries)
    if (entry.waiter.get() == waiter) entry.woken = false;
}

bool WakeBoard::is_poller(const std::string& name, const Waiter* waiter) {
  std::lock_guard lock(mutex_);
  auto it = queues_.find(name);
  return it != queues_.end() && !it->second.entries.empty() && it->second.entries.front().waiter.get() == waiter;
}

void WakeBoard::released(std::string_view name) {
  std::shared_ptr<Waiter> to_wake;
  {
    std::lock_guard lock(mutex_);
    auto it = queues_.find(name);
    if (it == queues_.end()) return;
    to_wake = pick(it->second, nullptr);
  }
  if (to_wake) to_wake->wake();
}

void WakeBoard::pass_on(const std::string& name, const Waiter* waiter) {
  std::shared_ptr<Waiter> to_wake;
  {
    std::lock_guard lock(mutex_);
    auto it = queues_.find(name);
    if (it == queues_.end()) return;
    to_wake = pick(it->second, waiter);
  }
  if (to_wake) to_wake->wake();
}

bool WakeBoard::notifying() {
  std::lock_guard lock(mutex_);
  return notifying_;
}

void WakeBoard::listen(std::stop_token stop) {
  std::unique_ptr<ReleaseListener> listener;
  while (!stop.stop_requested()) {
    std::vector<std::shared_ptr<Waiter>> to_wake;
    try {
      if (!listener) {
        listener = notifications_->listen();
        if (!listener) return;  // no notifications here: pollers and local releases do it all
        std::lock_guard lock(mutex_);
        listener_ = listener.get();
        for (auto& [name, queue] : queues_) queue.watched = false;
        to_unwatch_.clear();
      }
      std::vector<std::string> add, remove;
      {
        std::lock_guard lock(mutex_);
        for (auto& [name, queue] : queues_)
          if (!queue.watched) add.push_back(name);
        remove.swap(to_unwatch_);
      }
      for (auto& name : remove) listener->unwatch(name);
      for (auto& name : add) listener->watch(name);
      {
        std::lock_guard lock(mutex_);
        notifying_ = true;
        for (auto& name : add) {
          auto it = queues_.find(name);
          if (it == queues_.end()) {
            to_unwatch_.push_back(name);  // its last waiter left meanwhile
            continue;
          }
          it->second.watched = true;
          // A release before the watch was in place was not reported: every waiter looks again.
          for (auto& entry : it->second.entries) {
            entry.woken = true;
            to_wake.push_back(entry.waiter);
          }
        }
      }
      for (auto& waiter : to_wake) waiter->wake();
      to_wake.clear();
      // Its waiters are not in the fair queue: a release is a release, granted or not.
      for (auto& notice : listener->wait(kListenSlice))
        if (!notice.grant) released(notice.name);
    } catch (const std::exception& e) {
      logger_->warn("release listener of asynchronous waiters failed, reconnecting: {}", e.what());
      {
        std::lock_guard lock(mutex_);
        listener_ = nullptr;
        notifying_ = false;
        // Notifications may have been missed: every waiter looks again.
        for (auto& [name, queue] : queues_)
          for (auto& entry : queue.entries) {
            entry.woken = true;
            to_wake.push_back(entry.waiter);
          }
      }
      listener.reset();
      for (auto& waiter : to_wake) waiter->wake();
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, stop, kReconnectDelay, [] { return false; });
    }
  }
  std::lock_guard lock(mutex_);
  listener_ = nullptr;
}

}  // namespace dblock::detail
