// What a manager tells about its locks: the events its hook and tracing hear, the counters of
// stats(), and the errors thrown for a timeout or a lock lost before its release.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/duration.hpp"
#include "core/manager_base.hpp"

namespace dblock::detail {

ManagerStats ManagerBase::stats() const {
  return ManagerStats{acquired_.load(),
                      contended_.load(),
                      timeouts_.load(),
                      renewals_.load(),
                      lost_.load(),
                      retried_.load(),
                      std::chrono::milliseconds(waited_ms_.load()),
                      combined_.load(),
                      written_behind_.load(),
                      grants_unread_.load()};
}

void ManagerBase::emit(LockEventKind kind, std::string_view name, std::int64_t token, std::int64_t count,
                       std::chrono::milliseconds waited) const {
  emit(LockEvent{kind, name, token, count, waited});
}

void ManagerBase::emit(const LockEvent& event) const {
  if (event_tap_ != nullptr) {
    try {
      (*event_tap_)(event);
    } catch (...) {
      logger_->error("the test store's event tap threw; the event was dropped there");
    }
  }
  if (!options_.on_event) return;
  try {
    options_.on_event(event);
  } catch (...) {
    logger_->error("on_event callback threw; the event was dropped");
  }
}

void ManagerBase::report_released(HeldLock& held, std::int64_t left, SteadyClock::time_point sent) {
  if (left <= 0 && !held.claim_end())
    throw LockLost(fmt::format("lock '{}' (token {}) was lost before release: it had been reported lost", held.name,
                               held.token.load()));
  emit_released(held, left, sent);
}

void ManagerBase::report_failed_release(HeldLock& held, std::int64_t left, SteadyClock::time_point sent) {
  if (left > 0 || (!held.lost.load() && held.claim_end())) emit_released(held, left, sent);
}

void ManagerBase::emit_released(const HeldLock& held, std::int64_t left, SteadyClock::time_point sent) const {
  if (!options_.on_event && event_tap_ == nullptr) return;
  auto now = SteadyClock::now();
  using std::chrono::microseconds;
  LockEvent event{LockEventKind::released, held.name, held.token, left};
  if (left <= 0) event.held = std::chrono::duration_cast<microseconds>(now - held.granted);
  event.latency = std::chrono::duration_cast<microseconds>(now - sent);
  emit(event);
}

namespace {
LockEvent lost_event(const HeldLock& held) {
  LockEvent event{LockEventKind::lost, held.name, held.token};
  event.held = std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - held.granted);
  return event;
}
}  // namespace

void ManagerBase::count_acquired(std::string_view name, std::int64_t token, std::int64_t count,
                                 std::chrono::milliseconds waited, std::chrono::microseconds latency) {
  acquired_.fetch_add(1, std::memory_order_relaxed);
  LockEvent event{LockEventKind::acquired, name, token, count, waited};
  event.latency = latency;
  emit(event);
}

void ManagerBase::count_contended(std::string_view name) {
  contended_.fetch_add(1, std::memory_order_relaxed);
  emit(LockEventKind::contended, name);
}

std::chrono::milliseconds ManagerBase::count_wait(SteadyClock::time_point started) {
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started);
  waited_ms_.fetch_add(waited.count(), std::memory_order_relaxed);
  return waited;
}

void ManagerBase::throw_timeout(std::string_view name, std::chrono::milliseconds timeout,
                                SteadyClock::time_point started, const std::string& last_error, bool stopped) {
  auto waited = count_wait(started);
  timeouts_.fetch_add(1, std::memory_order_relaxed);
  emit(LockEventKind::timeout, name, 0, 0, waited);
  auto why = stopped ? fmt::format("its wait was stopped after {}", format_duration(waited))
                     : fmt::format("within {}", format_duration(timeout));
  throw Timeout(fmt::format("lock '{}' was not acquired {}{}", name, why,
                            last_error.empty() ? "" : "; last database error: " + last_error));
}

void ManagerBase::tell_user(const std::function<void(std::string_view, std::int64_t)>& callback, std::string_view what,
                            const HeldLock& held) const {
  if (!callback) return;
  try {
    callback(held.name, held.token);
  } catch (const std::exception& e) {
    logger_->error("{} callback for '{}' threw: {}", what, held.name, e.what());
  } catch (...) {
    logger_->error("{} callback for '{}' threw", what, held.name);
  }
}

void ManagerBase::report_lost(HeldLock& held, std::string_view why) {
  if (held.lost.exchange(true)) return;
  held.request_stop();
  // Its release told the user `released` first: that was the grant's end, and the lock is held by
  // nobody of this manager now, so there is nothing to stop (on_lost) and nothing to count.
  if (!held.claim_end()) {
    logger_->info("lock '{}' (token {}), released already, was found lost: {}", held.name, held.token.load(), why);
    return;
  }
  lost_.fetch_add(1, std::memory_order_relaxed);
  logger_->warn("lock '{}' (token {}) lost: {}", held.name, held.token.load(), why);
  emit(lost_event(held));
  tell_user(options_.on_lost, "on_lost", held);
}

void ManagerBase::report_release_requested(HeldLock& held) {
  if (held.lost.load() || held.release_requested.exchange(true)) return;
  logger_->info("lock '{}' (token {}): its release was requested", held.name, held.token.load());
  tell_user(options_.on_release_requested, "on_release_requested", held);
}

void ManagerBase::prepare_hand_over(HeldLock&, std::string_view) {
  throw InvalidArgument("handing a lock over to a successor needs table mode and ManagerOptions::fair_queue");
}

void ManagerBase::forgo_min_hold(Lock& lock) {
  std::lock_guard guard(mutex_);
  if (lock.held_ && lock.held_->depth == 1) lock.held_->min_hold = std::chrono::milliseconds(0);
}

void ManagerBase::throw_lost_on_release(HeldLock& held, std::string_view why) {
  // Reported once per grant, like the counter: a loss already reported ended the hold then.
  held.request_stop();
  if (!held.lost.exchange(true) && held.claim_end()) {
    lost_.fetch_add(1, std::memory_order_relaxed);
    logger_->warn("lock '{}' (token {}) was lost before release", held.name, held.token.load());
    emit(lost_event(held));
  }
  throw LockLost(fmt::format("lock '{}' (token {}) was lost before release: {}", held.name, held.token.load(), why));
}

void ManagerBase::count_renewal(std::int64_t renewed, std::chrono::microseconds latency) {
  renewals_.fetch_add(1, std::memory_order_relaxed);
  LockEvent event{LockEventKind::renewed, {}, 0, renewed};
  event.latency = latency;
  emit(event);
}

}  // namespace dblock::detail
