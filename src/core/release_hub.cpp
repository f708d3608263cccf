#include "core/release_hub.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include <spdlog/spdlog.h>

namespace dblock::detail {

namespace {
constexpr std::chrono::milliseconds kListenSlice{1000};
constexpr std::chrono::milliseconds kReconnectDelay{200};
}  // namespace

ReleaseHub::ReleaseHub(NotificationBackend* notifications, std::shared_ptr<spdlog::logger> logger)
    : notifications_(notifications), logger_(std::move(logger)), thread_([this](std::stop_token stop) { run(stop); }) {}

ReleaseHub::~ReleaseHub() {
  thread_.request_stop();
  {
    std::lock_guard lock(mutex_);
    if (listener_for_interrupt_ != nullptr) listener_for_interrupt_->interrupt();
  }
  changed_.notify_all();
  thread_.join();
}

std::unique_ptr<ReleaseHub::Subscription> ReleaseHub::subscribe(const std::string& name,
                                                                std::chrono::milliseconds ready_timeout,
                                                                std::string owner) {
  auto waiter = std::make_shared<Waiter>();
  waiter->owner = std::move(owner);
  std::unique_lock lock(mutex_);
  auto& watched = watched_[name];
  watched.waiters.push_back(waiter);
  if (listener_for_interrupt_ != nullptr) listener_for_interrupt_->interrupt();
  changed_.notify_all();
  auto deadline = std::chrono::steady_clock::now() + ready_timeout;
  changed_.wait_until(lock, deadline, [&] {
    auto it = watched_.find(name);
    return listener_failed_ || (it != watched_.end() && it->second.active);
  });
  return std::make_unique<Subscription>(*this, name, std::move(waiter));
}

bool ReleaseHub::notifying() {
  std::lock_guard lock(mutex_);
  return !listener_failed_ && listener_for_interrupt_ != nullptr;
}

bool ReleaseHub::has_waiters(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = watched_.find(name);
  return it != watched_.end() && !it->second.waiters.empty();
}

void ReleaseHub::signal_one(Watched& watched) {
  auto it = std::find_if(watched.waiters.begin(), watched.waiters.end(), [](auto& w) { return !w->signaled; });
  if (it != watched.waiters.end()) (*it)->signaled = true;
}

void ReleaseHub::signal_all() {
  for (auto& [name, watched] : watched_)
    for (auto& waiter : watched.waiters) waiter->signaled = true;
}

void ReleaseHub::deliver(std::vector<ReleaseNotice>& released) {
  for (std::size_t i = 0; i < released.size(); ++i) {
    auto& notice = released[i];
    auto it = watched_.find(notice.name);
    if (!notice.grant) {
      if (it != watched_.end()) signal_one(it->second);
      continue;
    }
    // The same release's plain notice comes next (one transaction's notifications arrive together,
    // in order): the grantee is woken here, and nobody else need look.
    if (i + 1 < released.size() && !released[i + 1].grant && released[i + 1].name == notice.name) ++i;
    if (it == watched_.end()) continue;
    for (auto& waiter : it->second.waiters)
      if (!waiter->owner.empty() && waiter->owner == notice.grant->owner) {
        waiter->grant = std::move(notice.grant);
        waiter->signaled = true;
        break;
      }
  }
}

void ReleaseHub::run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    try {
      if (!listener_) {
        auto listener = notifications_ != nullptr ? notifications_->listen() : nullptr;
        if (!listener) {
          std::unique_lock lock(mutex_);
          listener_failed_ = true;  // no notifications on this backend: subscriptions are timers
          changed_.notify_all();
          changed_.wait(lock, stop, [] { return false; });
          return;
        }
        std::lock_guard lock(mutex_);
        listener_ = std::move(listener);
        listener_for_interrupt_ = listener_.get();
        for (auto& [name, watched] : watched_) watched.active = false;
      }
      // Bring the listener's watch list in line with the waiters, outside the mutex.
      std::vector<std::string> add;
      std::vector<std::string> remove;
      {
        std::lock_guard lock(mutex_);
        for (auto& [name, watched] : watched_)
          if (!watched.active) add.push_back(name);
        remove.swap(to_unwatch_);
      }
      for (auto& name : remove) listener_->unwatch(name);
      for (auto& name : add) listener_->watch(name);
      {
        std::lock_guard lock(mutex_);
        listener_failed_ = false;
        for (auto& name : add) {
          if (auto it = watched_.find(name); it != watched_.end())
            it->second.active = true;
          else
            to_unwatch_.push_back(name);  // its last waiter left while we were watching it
        }
      }
      changed_.notify_all();
      auto released = listener_->wait(kListenSlice);
      if (released.empty()) continue;
      {
        std::lock_guard lock(mutex_);
        deliver(released);
      }
      changed_.notify_all();
    } catch (const std::exception& e) {
      logger_->warn("release listener failed, reconnecting: {}", e.what());
      {
        std::lock_guard lock(mutex_);
        listener_for_interrupt_ = nullptr;
        listener_failed_ = true;
        to_unwatch_.clear();
        signal_all();  // notifications may have been missed: let every waiter look again
      }
      listener_.reset();
      changed_.notify_all();
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, stop, kReconnectDelay, [] { return false; });
    }
  }
}

ReleaseHub::Subscription::Subscription(ReleaseHub& hub, std::string name, std::shared_ptr<Waiter> waiter)
    : hub_(hub), name_(std::move(name)), waiter_(std::move(waiter)) {}

ReleaseHub::Subscription::~Subscription() {
  std::lock_guard lock(hub_.mutex_);
  auto it = hub_.watched_.find(name_);
  if (it == hub_.watched_.end()) return;
  auto& waiters = it->second.waiters;
  bool pass_on = waiter_->signaled;
  std::erase(waiters, waiter_);
  if (waiters.empty()) {
    if (it->second.active) hub_.to_unwatch_.push_back(name_);
    hub_.watched_.erase(it);
    if (hub_.listener_for_interrupt_ != nullptr) hub_.listener_for_interrupt_->interrupt();
  } else if (pass_on) {
    hub_.signal_one(it->second);  // this waiter's wake-up was not used: hand it on
    hub_.changed_.notify_all();
  }
}

void ReleaseHub::Subscription::pass_on() {
  {
    std::lock_guard lock(hub_.mutex_);
    auto it = hub_.watched_.find(name_);
    if (it == hub_.watched_.end()) return;
    auto& waiters = it->second.waiters;
    auto next = std::find_if(waiters.begin(), waiters.end(),
                             [&](auto& waiter) { return waiter != waiter_ && !waiter->signaled; });
    if (next == waiters.end()) return;
    (*next)->signaled = true;
  }
  hub_.changed_.notify_all();
}

void ReleaseHub::Subscription::pass_on_later() {
  {
    std::lock_guard lock(hub_.mutex_);
    auto it = hub_.watched_.find(name_);
    if (it == hub_.watched_.end()) return;
    auto& waiters = it->second.waiters;
    auto self = std::find(waiters.begin(), waiters.end(), waiter_);
    if (self == waiters.end()) return;
    auto next = std::find_if(std::next(self), waiters.end(), [](auto& waiter) { return !waiter->signaled; });
    if (next == waiters.end()) return;
    (*next)->signaled = true;
  }
  hub_.changed_.notify_all();
}

std::optional<HandedGrant> ReleaseHub::Subscription::take_grant() {
  std::lock_guard lock(hub_.mutex_);
  return std::exchange(waiter_->grant, std::nullopt);
}

bool ReleaseHub::Subscription::wait_until(std::chrono::steady_clock::time_point until, const std::stop_token& stop) {
  std::unique_lock lock(hub_.mutex_);
  bool woken = hub_.changed_.wait_until(lock, stop, until, [&] { return waiter_->signaled; });
  waiter_->signaled = false;
  return woken;
}

}  // namespace dblock::detail
