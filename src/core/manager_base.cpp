#include "core/manager_base.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/validate.hpp"
#include "core/owner_id.hpp"
#include "core/store_parts.hpp"

namespace dblock::detail {

namespace {

std::chrono::milliseconds validated_check_interval(const ManagerOptions& options) {
  if (options.default_ttl < kMinTtl || options.default_ttl > kMaxTtl)
    throw InvalidArgument(fmt::format("ManagerOptions.default_ttl {}ms must be between {}ms and {}ms",
                                      options.default_ttl.count(), kMinTtl.count(), kMaxTtl.count()));
  if (options.renew_interval.count() < 0) throw InvalidArgument("ManagerOptions.renew_interval must not be negative");
  auto interval = options.renew_interval.count() > 0 ? options.renew_interval : options.default_ttl / 3;
  if (options.default_ttl < 3 * interval)
    throw InvalidArgument(fmt::format("ManagerOptions.renew_interval {}ms is more than a third of default_ttl {}ms",
                                      interval.count(), options.default_ttl.count()));
  if (options.backoff_initial.count() <= 0 || options.backoff_max < options.backoff_initial ||
      options.backoff_factor < 1.0)
    throw InvalidArgument("ManagerOptions backoff: need 0 < backoff_initial <= backoff_max and backoff_factor >= 1");
  validate_owner_tag(options.owner_tag);
  return interval;
}

}  // namespace

ManagerBase::ManagerBase(std::shared_ptr<Store> store, ManagerOptions options)
    : store_(std::move(store)),
      local_clock_(StoreParts::local_clock(*store_)),
      options_(std::move(options)),
      check_interval_(validated_check_interval(options_)),
      logger_(StoreParts::logger(*store_)),
      owner_id_(make_manager_owner_id(options_.owner_tag)) {
  if (const auto& tap = StoreParts::event_tap(*store_)) event_tap_ = &tap;
}

ManagerBase::~ManagerBase() { stop_threads(); }

void ManagerBase::stop_threads() {
  for (auto* thread : {&watchdog_, &timer_}) thread->request_stop();
  // A test's stalled statement lets the watchdog go: the join below would wait for it forever.
  if (local_clock_) {
    for (auto* waiter : {&watchdog_waiter_, &timer_waiter_})
      if (*waiter) local_clock_->retire(*waiter);
  }
  for (auto* thread : {&watchdog_, &timer_}) {
    if (!thread->joinable()) continue;
    // The last Lock can be dropped by the user's on_lost callback, i.e. on one of these threads.
    if (thread->get_id() == std::this_thread::get_id())
      thread->detach();
    else
      thread->join();
  }
  // After the join: the threads read their registrations until they stop (a detached one has
  // seen the stop already: it is the thread running this).
  if (local_clock_) {
    for (auto* waiter : {&watchdog_waiter_, &timer_waiter_})
      if (*waiter) local_clock_->leave(*waiter);
  }
  // No timer reports what is left to report, nor what the manager's end finds (its releases
  // written behind): both are only logged now.
  std::vector<std::pair<std::shared_ptr<HeldLock>, std::string>> left;
  {
    std::lock_guard lock(timer_mutex_);
    timer_stopped_ = true;
    left.swap(lost_later_);
  }
  for (auto& [held, why] : left) log_loss_at_end(*held, why);
}

void ManagerBase::log_loss_at_end(HeldLock& held, std::string_view why) {
  if (held.lost.exchange(true)) return;
  held.request_stop();
  if (!held.claim_end()) {
    logger_->info("lock '{}' (token {}), released already, was found lost as its manager ended: {}", held.name,
                  held.token.load(), why);
    return;
  }
  lost_.fetch_add(1, std::memory_order_relaxed);
  logger_->warn("lock '{}' (token {}) lost as its manager ended: {}", held.name, held.token.load(), why);
}

std::shared_ptr<ManagerBase> ManagerBase::start_for_users(std::shared_ptr<ManagerBase> core) {
  core->start();
  auto* manager = core.get();
  std::shared_ptr<ManagerBase> handle(manager, [core = std::move(core)](ManagerBase*) mutable {
    core->stop_threads();
    core.reset();  // the deleter lives as long as the weak user_handle_: let go of the core now
  });
  manager->user_handle_ = handle;
  return handle;
}

void ManagerBase::start() {
  if (local_clock_) {
    // Before the threads start: a test's advance() waits for both to be idle.
    watchdog_waiter_ = local_clock_->join(
        [this] {
          std::lock_guard lock(mutex_);
          wake_watchdog_.notify_all();
        },
        true);
    timer_waiter_ = local_clock_->join(
        [this] {
          std::lock_guard lock(timer_mutex_);
          wake_timer_.notify_all();
        },
        false);
  }
  watchdog_ = std::jthread([this](std::stop_token stop) { watchdog(std::move(stop)); });
  timer_ = std::jthread([this](std::stop_token stop) { deadline_timer(std::move(stop)); });
}

namespace {
[[noreturn]] void refuse_key(const AdvisoryKey& key) {
  throw InvalidArgument(
      fmt::format("explicit advisory key {} needs ManagerOptions.mode = LockMode::advisory", key.to_string()));
}
}  // namespace

std::optional<Lock> ManagerBase::try_acquire(const AdvisoryKey& key, const LockOptions&) { refuse_key(key); }

Lock ManagerBase::acquire(const AdvisoryKey& key, std::chrono::milliseconds, const LockOptions&) { refuse_key(key); }

std::string ManagerBase::owner_for_this_thread() const {
  if (options_.owner_scope == OwnerScope::manager) return owner_id_;
  return thread_owner_id(owner_id_, this_thread_owner_nonce());
}

std::uint64_t ManagerBase::owner_key_for_this_thread() const {
  return options_.owner_scope == OwnerScope::manager ? 0 : this_thread_owner_nonce();
}

void ManagerBase::report_lost_later(std::shared_ptr<HeldLock> held, std::string why) {
  {
    std::lock_guard lock(timer_mutex_);
    if (!timer_stopped_) {
      lost_later_.emplace_back(std::move(held), std::move(why));
      wake_timer_.notify_all();
      return;
    }
  }
  log_loss_at_end(*held, why);
}

void ManagerBase::watch_deadline(SteadyClock::time_point deadline) {
  {
    std::lock_guard lock(timer_mutex_);
    if (deadline >= timer_wakes_at_) return;
    sooner_deadline_ = true;
  }
  wake_timer_.notify_all();
}

void ManagerBase::deadline_timer(std::stop_token stop) {
  while (!stop.stop_requested()) {
    auto self = weak_from_this().lock();  // keeps this alive through user callbacks
    if (!self) return;
    {
      // Set before the snapshot: a record added from here on is either in it or wakes this thread.
      std::lock_guard lock(timer_mutex_);
      timer_wakes_at_ = SteadyClock::time_point::max();
    }
    auto now = local_now();
    // Waking at least every check interval sees every new lock long before its deadline
    // (a TTL is at least three check intervals).
    auto next = now + check_interval_;
    std::vector<std::shared_ptr<HeldLock>> overdue;
    for (auto& held : held_snapshot()) {
      if (held->lost.load()) continue;
      auto deadline = held->deadline();
      if (now >= deadline)
        overdue.push_back(std::move(held));
      else
        next = std::min(next, deadline);
    }
    for (auto& held : overdue) deadline_passed(held);
    overdue.clear();
    std::vector<std::pair<std::shared_ptr<HeldLock>, std::string>> lost_later;
    {
      std::lock_guard lock(timer_mutex_);
      lost_later.swap(lost_later_);
    }
    for (auto& [held, why] : lost_later) report_lost(*held, why);
    lost_later.clear();
    self.reset();  // may destroy *this on this thread; the destructor then requested stop
    if (stop.stop_requested()) return;
    std::unique_lock lock(timer_mutex_);
    timer_wakes_at_ = next;
    if (local_clock_) {
      // Woken by the clock's moves; idle for the test's advance() while it waits.
      wake_timer_.wait(lock, stop, [&] {
        bool other = !lost_later_.empty() || sooner_deadline_;
        return local_clock_->due(*timer_waiter_, other ? SteadyClock::time_point::min() : next);
      });
    } else {
      wake_timer_.wait_until(lock, stop, next, [&] { return !lost_later_.empty() || sooner_deadline_; });
    }
    sooner_deadline_ = false;
  }
}

void ManagerBase::watchdog(std::stop_token stop) {
  bool retry_soon = false;
  while (!stop.stop_requested()) {
    {
      std::unique_lock lock(mutex_);
      auto interval = retry_soon ? std::max(check_interval_ / 4, std::chrono::milliseconds(1)) : check_interval_;
      if (local_clock_) {
        auto next = local_now() + interval;
        wake_watchdog_.wait(lock, stop, [&] { return local_clock_->due(*watchdog_waiter_, next); });
      } else {
        wake_watchdog_.wait_for(lock, stop, interval, [] { return false; });
      }
    }
    if (stop.stop_requested()) return;
    auto self = weak_from_this().lock();  // keeps this alive through user callbacks
    if (!self) return;
    retry_soon = !watchdog_cycle();
    self.reset();  // may destroy *this on this thread; the destructor then requested stop
  }
}

}  // namespace dblock::detail
