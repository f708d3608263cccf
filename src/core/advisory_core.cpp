#include "core/advisory_core.hpp"

#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/backend_errors.hpp"
#include "base/validate.hpp"
#include "core/backoff.hpp"
#include "core/owner_id.hpp"
#include "core/store_parts.hpp"

namespace dblock::detail {

namespace {
/// How soon a session the server had already ended fails its next statement (a round trip or
/// two); a stalled one fails at its statement deadline, later than this past the server-side wait.
constexpr std::chrono::milliseconds kPromptBreak{500};
/// How long a wait that a stop token can end waits in the server before it looks at the token.
constexpr std::chrono::milliseconds kStoppableSlice{250};
}  // namespace

AdvisoryCore::AdvisoryCore(std::shared_ptr<Store> store, ManagerOptions options)
    : ManagerBase(std::move(store), std::move(options)), advisory_(StoreParts::backend(*store_).advisory().get()) {
  store_->check_schema();  // the token sequence and the wait function live in dblock's schema
}

void AdvisoryCore::start() {
  ManagerBase::start();
  on_pool_dry_ = std::make_shared<const std::function<void()>>([weak = weak_from_this()] {
    auto self = weak.lock();  // null while this manager is being destroyed
    if (!self) return;
    auto& core = static_cast<AdvisoryCore&>(*self);
    std::vector<std::shared_ptr<Pinned>> owners;
    {
      std::lock_guard lock(core.mutex_);
      for (auto& [key, pinned] : core.pinned_) owners.push_back(pinned);
    }
    core.give_back_idle_sessions(owners);
  });
  advisory_.on_pool_dry(on_pool_dry_);
}

std::optional<Lock> AdvisoryCore::try_acquire(std::string_view name, const LockOptions& options) {
  validate_lock_name(name);
  return acquire_key(name, AdvisoryKey::from_name(name), options, std::nullopt);
}

Lock AdvisoryCore::acquire(std::string_view name, std::chrono::milliseconds timeout, const LockOptions& options,
                           const std::stop_token& stop) {
  validate_lock_name(name);
  return std::move(*acquire_key(name, AdvisoryKey::from_name(name), options, timeout, stop));
}

std::optional<Lock> AdvisoryCore::try_acquire(const AdvisoryKey& key, const LockOptions& options) {
  return acquire_key({}, key, options, std::nullopt);
}

Lock AdvisoryCore::acquire(const AdvisoryKey& key, std::chrono::milliseconds timeout, const LockOptions& options) {
  return std::move(*acquire_key({}, key, options, timeout));
}

std::optional<Lock> AdvisoryCore::acquire_key(std::string_view lock_name, const AdvisoryKey& key,
                                              const LockOptions& options,
                                              std::optional<std::chrono::milliseconds> timeout,
                                              const std::stop_token& stop) {
  if (options.permits != 0)
    throw InvalidArgument("semaphores (LockOptions::permits) need ManagerOptions.mode = LockMode::table");
  if (options.min_hold.count() != 0)  // a server-side lock ends with its release: nothing can keep it
    throw InvalidArgument("a minimum hold (LockOptions::min_hold) needs ManagerOptions.mode = LockMode::table");
  if (options.lock_delay.count() != 0)  // a server-side lock ends with its session: nothing can keep it
    throw InvalidArgument("a lock-delay (LockOptions::lock_delay) needs ManagerOptions.mode = LockMode::table");
  if (!options.note.empty())  // a server-side lock has no row to keep it in
    throw InvalidArgument("a holder's note (LockOptions::note) needs ManagerOptions.mode = LockMode::table");
  AdvisoryTarget target{key, lock_name, options.shared};
  advisory_.check_advisory_target(target);
  std::string key_text;  // the name an explicit key is shown under
  std::string_view name = lock_name.empty() ? std::string_view(key_text = key.to_string()) : lock_name;
  if (options.ttl.count() != 0)
    throw InvalidArgument(fmt::format(
        "lock '{}': advisory locks have no lease, so LockOptions.ttl must be 0 (got {}ms)", name, options.ttl.count()));
  if (timeout && timeout->count() < 0) throw InvalidArgument(fmt::format("timeout {}ms is negative", timeout->count()));
  auto started = SteadyClock::now();
  auto deadline = started + timeout.value_or(std::chrono::milliseconds(0));
  auto left = [&] { return std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now()); };
  std::optional<Backoff> backoff;  // only an outage needs it; its random engine is not free
  std::string last_error;
  WaitReport wait_report(*this, name, started);
  auto pinned = pin();
  try {
    // One try first (the cheap statement, and an honest `contended` count); then the server's own
    // blocking wait for the time that is left, bounded by lock_timeout.
    bool tried = false;
    while (true) {
      auto wait = tried ? std::max(left(), std::chrono::milliseconds(1)) : std::chrono::milliseconds(0);
      // A wait that can be stopped waits in the server a slice at a time, and looks between slices.
      if (stop.stop_possible()) wait = std::min(wait, kStoppableSlice);
      try {
        auto [lock, new_record] = attempt(name, target, pinned, wait, started);
        if (lock) {
          wait_report.settle();
          if (!new_record) unpin(pinned);  // a re-entry: the held record keeps its own pin
          return std::move(lock);
        }
        if (!tried) count_contended(name);
        if (!timeout || timeout->count() == 0) break;
        tried = true;
        wait_report.begin();
      } catch (const Error& e) {
        // A connection failure (the pool opens a fresh session) or a deadlock the server broke by
        // cancelling our wait (nothing was granted): a waiter keeps trying until its deadline,
        // backing off so that a deadlock detected at once (MySQL) does not spin.
        bool retryable =
            e.category() == ErrorCategory::connection || dynamic_cast<const TransientError*>(&e) != nullptr;
        if (!retryable || !timeout || left().count() <= 0) throw;
        last_error = e.what();
        logger_->warn("waiting for advisory lock '{}': {}", name, e.what());
        if (!backoff)
          backoff.emplace(options_.backoff_initial, options_.backoff_factor, options_.backoff_max,
                          this_thread_owner_nonce());
        std::this_thread::sleep_for(std::min(backoff->next(), left()));
      }
      if (tried && (left().count() <= 0 || stop.stop_requested())) break;
    }
  } catch (...) {
    unpin(pinned);
    throw;
  }
  unpin(pinned);
  if (!timeout) return std::nullopt;
  wait_report.settle();
  throw_timeout(name, *timeout, started, last_error, stop.stop_requested());
}

namespace {

bool server_cancelled(const Error& e) {
  std::string_view state = e.sqlstate();
  return state == "57014" || state == "70100";  // PostgreSQL query_canceled; MySQL query interrupted
}

}  // namespace

std::pair<std::optional<Lock>, bool> AdvisoryCore::attempt(std::string_view name, const AdvisoryTarget& target,
                                                           const std::shared_ptr<Pinned>& pinned,
                                                           std::chrono::milliseconds wait,
                                                           SteadyClock::time_point started) {
  std::shared_ptr<AdvisoryHeld> reentered;
  std::int64_t depth = 0;
  std::optional<std::int64_t> token;
  std::shared_ptr<AdvisoryHeld> held;  // a new grant's record
  SteadyClock::time_point alive_at;    // when the new lock's session was last seen alive
  {
    // Every grant of this owner goes through `use`, so a re-entry is seen here, and the server is
    // asked once per lock however deep the re-entry goes.
    std::unique_lock use(pinned->use);
    bool holds_others = false;
    bool overdue_record = false;
    {
      std::lock_guard lock(mutex_);
      auto it = pinned->held.find(key_of(target));
      if (it != pinned->held.end()) {
        // A record past its deadline that the deadline timer has not reached yet (it may be busy
        // with another lock's on_lost) is no longer believed: nothing is handed out on it.
        overdue_record = !it->second->believed_held(SteadyClock::now());
        if (!overdue_record) {
          depth = ++it->second->depth;
          reentered = it->second;
        }
      }
      holds_others = !pinned->held.empty();
    }
    if (overdue_record)
      throw ConnectionError(
          fmt::format("lock '{}': not re-entered: the lock it would re-enter passed its local "
                      "deadline (its connection gave no sign of life) and is being reported lost",
                      name));
    // While the owner holds other locks on this session, a server-side wait ends every check
    // interval: each return proves the session (so those locks) alive, as the watchdog's check,
    // which skips a busy session, would.
    if (holds_others) wait = std::min(wait, check_interval_);
    wait = std::min(wait, advisory_.longest_server_wait());  // longer waits are served in turns
    auto sent = SteadyClock::now();
    if (!reentered) token = lock_on_session(use, pinned, target, wait);
    // A grant after a server-side wait came at the end of it: the reply, not the request, is the
    // sign of life its deadline counts from.
    alive_at = wait.count() > 0 ? SteadyClock::now() : sent;
    if (token) {
      held = std::make_shared<AdvisoryHeld>(std::string(name), *token, target, pinned, options_.default_ttl, alive_at);
      held->depth = 1;
      bool overdue = false;
      {
        // Checked where deadline_passed sets it: a lock on this session that passed its deadline
        // while the statement ran makes the session one the owner's next statement drops, and
        // the server lets go of this grant with it. So it is never believed: dropped here, with
        // `use` still held, and the caller told the connection was given up.
        std::lock_guard lock(mutex_);
        overdue = pinned->overdue;
        if (!overdue) pinned->held[key_of(held->target)] = held;
      }
      if (overdue) {
        drop_if_overdue(pinned);
        throw ConnectionError(fmt::format(
            "lock '{}': granted on a connection given up meanwhile (another lock on it passed its deadline)", name));
      }
    }
  }
  if (reentered) {  // user callbacks run outside the locks
    count_acquired(name, reentered->token, depth, std::chrono::milliseconds(0));
    return {make_guard(std::move(reentered), depth), false};
  }
  if (!held) return {std::nullopt, false};
  count_acquired(name, *token, 1, wait.count() > 0 ? count_wait(started) : std::chrono::milliseconds(0));
  return {make_guard(std::move(held), 1), true};
}

std::int64_t AdvisoryCore::token_of(HeldLock& base) {
  if (auto token = base.token.load(); token != 0) return token;
  auto& held = static_cast<AdvisoryHeld&>(base);
  auto& pinned = held.pinned;
  std::unique_lock use(pinned->use);
  if (auto token = held.token.load(); token != 0) return token;  // drawn meanwhile by another thread
  auto refuse = [&](std::string_view why) {
    return LockLost(fmt::format("lock '{}': no fencing token, the lock is gone ({})", held.name, why));
  };
  if (!held.believed_held(SteadyClock::now())) throw refuse("reported lost");
  {
    // A lock its connection was detached from is out of the owner's records before it is reported
    // lost: a token drawn on the owner's next connection would fence for a lock it no longer holds.
    std::lock_guard lock(mutex_);
    if (!registered(held)) throw refuse("its connection was dropped");
  }
  if (!pinned->session) throw refuse("its connection was dropped");
  auto sent = SteadyClock::now();
  try {
    auto token = pinned->session->draw_token();
    prove_alive(pinned, sent);
    held.token = token;
    return token;
  } catch (const ConnectionError& e) {
    auto gone = detach_session(pinned);
    use.unlock();
    report_all_lost(gone, fmt::format("the connection holding it broke: {}", e.what()));
    throw refuse(e.what());
  }
}

std::optional<std::int64_t> AdvisoryCore::lock_on_session(std::unique_lock<std::recursive_mutex>& use,
                                                          const std::shared_ptr<Pinned>& pinned,
                                                          const AdvisoryTarget& target,
                                                          std::chrono::milliseconds wait) {
  drop_if_overdue(pinned);
  bool kept = pinned->session != nullptr;  // from an earlier lock: the server may have ended it since
  if (!kept)
    pinned->session = advisory_.pin_advisory_session(pinned_session_silence(check_interval_, options_.default_ttl));
  auto sent = SteadyClock::now();
  std::vector<std::shared_ptr<AdvisoryHeld>> gone;
  std::string why;
  try {
    auto token = pinned->session->lock(target, wait);
    prove_alive(pinned, sent);
    return token;
  } catch (const ConnectionError& e) {
    gone = detach_session(pinned);
    // A kept session that held nothing and broke at once: the server had ended it while idle
    // (MariaDB's wait_timeout after this process was paused, an administrator's KILL). Nothing was
    // lost, and nothing can stay granted: a grant the statement made went with the session, now
    // closed. Once more on a fresh session (which cannot come back here). A session that stalled
    // fails later: at its statement deadline, past the wait.
    auto failed_after = SteadyClock::now() - sent;
    if (kept && gone.empty() &&
        (dynamic_cast<const OutcomeUnknown*>(&e) == nullptr || failed_after < wait + kPromptBreak))
      return lock_on_session(use, pinned, target, wait);
    use.unlock();
    report_all_lost(gone, fmt::format("the connection holding it broke: {}", e.what()));
    throw;
  } catch (const Error& e) {
    // The server may have granted the lock before the same statement failed (drawing the token,
    // a cancel at the instant of the grant): give it back, or give up the whole session.
    try {
      pinned->session->unlock(target);
    } catch (const std::exception& unlock_error) {
      gone = detach_session(pinned);
      why = fmt::format("a failed lock statement left its connection in doubt: {}", unlock_error.what());
    }
    if (!gone.empty()) {
      use.unlock();
      report_all_lost(gone, why);
    }
    if (server_cancelled(e))
      throw Timeout(
          fmt::format("the server cancelled the wait for an advisory lock ({}): a server-side statement "
                      "timeout is shorter than the wait",
                      e.what()));
    throw;
  }
}

void AdvisoryCore::release(const std::shared_ptr<HeldLock>& held_base) {
  auto held = std::static_pointer_cast<AdvisoryHeld>(held_base);
  std::int64_t depth = 0;
  bool registered = false;
  {
    std::lock_guard lock(mutex_);
    depth = --held->depth;
    registered = this->registered(*held);
    if (depth <= 0 && registered) held->pinned->held.erase(key_of(held->target));
  }
  if (depth > 0) {
    auto now = SteadyClock::now();
    // An inner level of a lock that was lost meanwhile is not released "fine" (as in table mode).
    if (!registered || !held->believed_held(now))
      throw_lost_on_release(*held, "its connection broke or stalled, so the server may have released it");
    report_released(*held, depth, now);
    return;
  }
  if (!registered) throw_lost_on_release(*held, "its connection broke or stalled, so the server may have released it");
  std::string why;
  std::vector<std::shared_ptr<AdvisoryHeld>> gone;
  auto sent = SteadyClock::now();
  {
    std::unique_lock use(held->pinned->use);
    drop_if_overdue(held->pinned);
    sent = SteadyClock::now();
    try {
      if (!held->pinned->session)
        why = "the connection holding it broke, so the server released it";
      else if (!held->pinned->session->unlock(held->target))
        why = "the server no longer held it";
      else
        prove_alive(held->pinned, sent);
    } catch (const std::exception& e) {
      // Whatever failed, the server may still hold it: the session goes (and every lock on it).
      why = fmt::format("unlocking failed, so its connection was given up: {}", e.what());
      gone = detach_session(held->pinned);
    }
  }
  report_all_lost(gone, why);
  unpin(held->pinned);
  if (!why.empty()) throw_lost_on_release(*held, why);
  report_released(*held, 0, sent);
}

}  // namespace dblock::detail
