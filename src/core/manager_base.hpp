#pragma once
// What every LockManager mode shares: options, owner identity, counters and events, the
// lost-lock report, and the watchdog thread that runs the mode's periodic check. Lock guards
// share ownership of it, so locks outlive the LockManager object that made them.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <dblock/advisory_key.hpp>
#include <dblock/lock.hpp>
#include <dblock/lock_manager.hpp>
#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include "core/manual_clock.hpp"
#include "core/retry.hpp"

namespace dblock::detail {

using SteadyClock = std::chrono::steady_clock;

/// Clock-rate allowance: a local deadline falls this much before `sent + ttl`, so that a client
/// clock running slightly slower than the database's still stops its holder first.
[[nodiscard]] constexpr std::chrono::milliseconds clock_allowance(std::chrono::milliseconds ttl) {
  return ttl / 100 + std::chrono::milliseconds(1);
}

/// The local deadline of a lease whose statement was sent at `sent`.
[[nodiscard]] inline SteadyClock::time_point lease_deadline(SteadyClock::time_point sent,
                                                            std::chrono::milliseconds ttl) {
  return sent + ttl - clock_allowance(ttl);
}

/// One acquisition a manager holds; every re-entrant guard of it shares this record.
/// The belief "held" (lost() false) ends at the latest at the local deadline: `lost` is sticky,
/// and the deadline only moves forward while the lock is still believed held (back only by end_belief).
struct HeldLock {
  HeldLock(std::string name_in, std::string owner_in, std::int64_t token_in, std::chrono::milliseconds ttl_in,
           SteadyClock::time_point deadline, HolderKind kind_in = HolderKind::exclusive)
      : name(std::move(name_in)),
        owner(std::move(owner_in)),
        token(token_in),
        kind(kind_in),
        ttl(ttl_in),
        local_deadline(deadline.time_since_epoch().count()) {}
  virtual ~HeldLock() = default;
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;

  [[nodiscard]] SteadyClock::time_point deadline() const {
    return SteadyClock::time_point(SteadyClock::duration(local_deadline.load()));
  }
  /// Not reported lost and before the deadline at `now`.
  [[nodiscard]] bool believed_held(SteadyClock::time_point now) const { return !lost.load() && now < deadline(); }
  /// Moves the deadline to `later` (never back), unless the lock was lost, its belief ended, or
  /// its deadline had passed at `now`: a lease that lapsed, even for an instant, may have been
  /// granted to another.
  bool extend(SteadyClock::time_point later, SteadyClock::time_point now) {
    auto current = local_deadline.load();
    auto wanted = later.time_since_epoch().count();
    while (true) {
      if (lost.load() || ended.load() || now.time_since_epoch().count() >= current) return false;
      if (wanted <= current) return true;
      if (local_deadline.compare_exchange_weak(current, wanted)) return true;
    }
  }
  /// Ends the belief at `now` for good (the one move of the deadline back): for a record whose row
  /// is about to go while its loss is reported later, off the caller's gate. For good, because a
  /// renewal answered before the row went may be handled after this, with a `now` read earlier
  /// than ours: the deadline alone would let it extend the record again.
  void end_belief(SteadyClock::time_point now) {
    ended.store(true);
    auto wanted = now.time_since_epoch().count();
    auto current = local_deadline.load();
    while (current > wanted && !local_deadline.compare_exchange_weak(current, wanted)) {
    }
  }
  /// Claims the one report of this grant's end, the released event of its last level or its loss:
  /// true for the first caller only, so that the event hook, the metrics and the spans see each
  /// grant end exactly once, whichever of its release, a renewal, the deadline timer or the end of
  /// the manager comes first. A loss sets `lost` before it claims: an end claimed by another than
  /// the grant's last release was a loss.
  bool claim_end() { return !end_reported.exchange(true); }
  /// Raises the TTL renewals ask for to `at_least` (a re-entry with a longer TTL).
  void raise_ttl(std::chrono::milliseconds at_least) {
    auto current = ttl.load();
    while (current < at_least && !ttl.compare_exchange_weak(current, at_least)) {
    }
  }

  const std::string name;
  const std::string owner;
  /// The fencing token; 0 in advisory mode until first asked for (token_of), then set once.
  std::atomic<std::int64_t> token;
  const HolderKind kind;                       // table mode: exclusive, or a member of a group (permit, shared)
  std::atomic<std::chrono::milliseconds> ttl;  // the longest any re-entry asked for: what the database holds
  std::atomic<bool> lost{false};
  std::atomic<bool> ended{false};              // end_belief() ran: no renewal extends it again
  std::atomic<bool> end_reported{false};       // claim_end() ran: the grant's end was reported
  std::atomic<bool> release_requested{false};  // a renewal found this grant asked to let go
  std::atomic<SteadyClock::rep> local_deadline;
  std::int64_t depth = 0;  // guarded by the manager's mutex_
  std::string hand_to;     // Lock::hand_over's successor: set before the last release, on the releasing thread
  std::chrono::milliseconds min_hold{0};  // table mode: the longest any level asked for; guarded by mutex_
  const SteadyClock::time_point granted = SteadyClock::now();  // for LockEvent::held
  /// Lock::stop_token(): requested once the grant is lost (report_lost and its kin), never on
  /// release. Its state is made on first ask (no allocation per grant for those who never ask).
  [[nodiscard]] std::stop_token stop_token() {
    std::lock_guard lock(stop_mutex_);
    if (!stop_) {
      stop_.emplace();
      if (stop_wanted_) stop_->request_stop();  // no callback can be registered yet
    }
    return stop_->get_token();
  }
  /// Requests the stop; its callbacks run on this thread, outside the record's lock.
  void request_stop() {
    std::optional<std::stop_source> source;
    {
      std::lock_guard lock(stop_mutex_);
      stop_wanted_ = true;
      source = stop_;
    }
    if (source) source->request_stop();
  }

 private:
  std::mutex stop_mutex_;
  std::optional<std::stop_source> stop_;  // guarded by stop_mutex_
  bool stop_wanted_ = false;              // guarded by stop_mutex_
};

class ManagerBase : public std::enable_shared_from_this<ManagerBase> {
 public:
  /// Validates the options every mode shares. `check_interval`: how often the watchdog runs.
  ManagerBase(std::shared_ptr<Store> store, ManagerOptions options);
  virtual ~ManagerBase();
  ManagerBase(const ManagerBase&) = delete;
  ManagerBase& operator=(const ManagerBase&) = delete;

  /// Starts `core`'s threads and returns the handle its users hold (LockManager and every Lock).
  /// When the last handle goes, the threads are stopped and joined on that thread, so the manager
  /// never ends on one of its own threads, which nobody would join (and which could still be
  /// closing connections while the process exits). The one exception: the last handle dropped
  /// inside an on_lost callback, on the watchdog thread itself, which then finishes detached.
  static std::shared_ptr<ManagerBase> start_for_users(std::shared_ptr<ManagerBase> core);

  virtual std::optional<Lock> try_acquire(std::string_view name, const LockOptions& options) = 0;
  /// `stop`: LockManager::acquire's; a request on it ends the wait as the deadline would.
  virtual Lock acquire(std::string_view name, std::chrono::milliseconds timeout, const LockOptions& options,
                       const std::stop_token& stop = {}) = 0;
  virtual std::optional<Lock> try_acquire(const AdvisoryKey& key, const LockOptions& options);
  virtual Lock acquire(const AdvisoryKey& key, std::chrono::milliseconds timeout, const LockOptions& options);
  /// Releases one level of `held`; the guard has already let go of it.
  virtual void release(const std::shared_ptr<HeldLock>& held) = 0;
  /// Lock::hand_over(): marks `held` (its last level) to be granted to `successor` by its release.
  /// @throws InvalidArgument where no hand-over is possible (this default: not a fair-queue manager).
  virtual void prepare_hand_over(HeldLock& held, std::string_view successor);
  /// A lock set that failed gives back what it took at once: a name it took afresh (its only
  /// level) is released without the minimum hold it asked for.
  void forgo_min_hold(Lock& lock);
  /// Lock::token(): the held lock's fencing token. Advisory mode draws it here when first asked.
  /// @throws LockLost when it must be drawn and the lock is gone.
  virtual std::int64_t token_of(HeldLock& held) { return held.token; }

  /// The clock a lease's belief is read on: the steady clock, or dblock::testing's (manual_clock.hpp).
  [[nodiscard]] SteadyClock::time_point local_now() const {
    return local_clock_ ? local_clock_->now() : SteadyClock::now();
  }

  [[nodiscard]] std::string owner_for_this_thread() const;
  /// The calling thread's owner as a number, cheaper to look up than its id: 0 for the manager's
  /// own owner (OwnerScope::manager), else the thread's nonce.
  [[nodiscard]] std::uint64_t owner_key_for_this_thread() const;
  [[nodiscard]] ManagerStats stats() const;
  [[nodiscard]] spdlog::logger& logger() const { return *logger_; }

 protected:
  /// One watchdog round (renewal, connection check). False: run again soon.
  virtual bool watchdog_cycle() = 0;
  /// Every record held now (for the deadline timer). Takes mutex_.
  virtual std::vector<std::shared_ptr<HeldLock>> held_snapshot() = 0;
  /// The deadline timer found `held` past its local deadline: take it out and report it lost.
  virtual void deadline_passed(const std::shared_ptr<HeldLock>& held) = 0;

  Lock make_guard(std::shared_ptr<HeldLock> held, std::int64_t count) {
    return Lock(user_handle_.lock(), std::move(held), count);
  }
  void emit(LockEventKind kind, std::string_view name, std::int64_t token = 0, std::int64_t count = 0,
            std::chrono::milliseconds waited = std::chrono::milliseconds(0)) const;
  void emit(const LockEvent& event) const;
  /// The released event of one level of `held`, `left` levels being left; `sent`: when its
  /// statement went out. The last level's ends the grant. @throws LockLost when a loss reported
  /// first ended it: its release must not say otherwise.
  void report_released(HeldLock& held, std::int64_t left, SteadyClock::time_point sent);
  /// A release whose statement failed (the error reaches its caller) let go of its level all the
  /// same: nothing renews it any more and the row lapses with its lease. Reported released, `left`
  /// levels being left here, unless a loss ended the grant first.
  void report_failed_release(HeldLock& held, std::int64_t left, SteadyClock::time_point sent);
  /// The released event of a level whose report this caller may make: an inner level, or a last
  /// one whose end it has claimed (HeldLock::claim_end).
  void emit_released(const HeldLock& held, std::int64_t left, SteadyClock::time_point sent) const;
  /// One acquire() call's wait as events: `waiting` once it starts, and `failed` when the call
  /// leaves by an error after that (acquired and timeout report themselves: call settle() first).
  class WaitReport {
   public:
    WaitReport(const ManagerBase& manager, std::string_view name, SteadyClock::time_point started)
        : manager_(manager), name_(name), started_(started) {}
    ~WaitReport() {
      if (begun_ && !settled_)
        manager_.emit(LockEventKind::failed, name_, 0, 0,
                      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started_));
    }
    WaitReport(const WaitReport&) = delete;
    WaitReport& operator=(const WaitReport&) = delete;
    void begin() {
      if (!begun_) manager_.emit(LockEventKind::waiting, name_);
      begun_ = true;
    }
    void settle() { settled_ = true; }

   private:
    const ManagerBase& manager_;
    std::string_view name_;
    SteadyClock::time_point started_;
    bool begun_ = false, settled_ = false;
  };
  /// `latency`: the granting statement's round trip (LockEvent::latency).
  void count_acquired(std::string_view name, std::int64_t token, std::int64_t count, std::chrono::milliseconds waited,
                      std::chrono::microseconds latency = {});
  void count_contended(std::string_view name);
  /// retry_transient, counting every repeat in stats().retried.
  template <class Fn>
  auto with_retries(Fn&& statement) {
    return retry_transient(std::forward<Fn>(statement), [this] { count_retry(); });
  }
  /// with_retries bounded by kReleaseRetryTime instead of attempts, for releases.
  template <class Fn>
  auto with_release_retries(Fn&& statement) {
    return retry_transient_for(
        std::forward<Fn>(statement), [this] { count_retry(); }, kReleaseRetryTime);
  }
  /// with_retries for a statement safe to run twice (a read, a renewal): asked again once when its
  /// reply was lost.
  template <class Fn>
  auto with_read_retries(Fn&& statement) {
    return with_retries([&] { return repeat_if_reply_lost(statement); });
  }
  /// Counts a wait that ended after `started` and returns its length.
  std::chrono::milliseconds count_wait(SteadyClock::time_point started);
  /// Timeout for a wait that reached its deadline, or that a stop request ended (`stopped`).
  [[noreturn]] void throw_timeout(std::string_view name, std::chrono::milliseconds timeout,
                                  SteadyClock::time_point started, const std::string& last_error, bool stopped = false);
  /// Marks `held` lost once: counter, warning, event and the user's on_lost callback; only logged
  /// when its release has already ended the grant (a loss found since is no second end).
  void report_lost(HeldLock& held, std::string_view why);
  /// A renewal found `held`'s grant asked to let go (Store::request_release): once per grant, a log
  /// line and the user's on_release_requested callback, unless the grant was lost meanwhile.
  void report_release_requested(HeldLock& held);
  /// Calls the user's callback for `held` (on_lost, on_release_requested); what it throws is logged.
  void tell_user(const std::function<void(std::string_view, std::int64_t)>& callback, std::string_view what,
                 const HeldLock& held) const;
  /// LockLost for a release that found the lock gone (counted and reported unless it already was).
  [[noreturn]] void throw_lost_on_release(HeldLock& held, std::string_view why);
  void count_renewal(std::int64_t renewed, std::chrono::microseconds latency = {});
  /// A request went out in a statement of `carried` requests.
  void count_statement_share(std::size_t carried) {
    if (carried > 1) combined_.fetch_add(1, std::memory_order_relaxed);
  }
  void count_written_behind() { written_behind_.fetch_add(1, std::memory_order_relaxed); }
  void count_grant_unread() { grants_unread_.fetch_add(1, std::memory_order_relaxed); }
  void count_retry() {
    retried_.fetch_add(1, std::memory_order_relaxed);
    if (std::this_thread::get_id() != callback_free_thread_.load()) emit(LockEventKind::retried, {});
  }
  /// A thread of the core's own that must never run user code (on_event, on_lost): a callback
  /// could drop the last handle and end the manager on the very thread its destructor joins.
  void set_callback_free_thread(std::thread::id id) { callback_free_thread_.store(id); }
  /// report_lost, on the deadline timer's thread (which may end the manager), for a loss found on a
  /// callback-free thread.
  void report_lost_later(std::shared_ptr<HeldLock> held, std::string why);
  /// What report_lost_later does once the timer has stopped: the loss is logged and counted
  /// (logged only when the grant had ended already).
  void log_loss_at_end(HeldLock& held, std::string_view why);
  /// For a record whose deadline may come before the deadline timer's next round (one adopted with
  /// the lease left on its row, which can be any length): wakes the timer to plan for it, so that
  /// its loss is reported at that deadline, not up to a check interval later.
  void watch_deadline(SteadyClock::time_point deadline);

  std::shared_ptr<Store> store_;
  const std::shared_ptr<ManualClock> local_clock_;  // dblock::testing's, else null (the steady clock)
  const ManagerOptions options_;
  const std::chrono::milliseconds check_interval_;
  std::shared_ptr<spdlog::logger> logger_;
  mutable std::mutex mutex_;

  /// Called once the manager is owned by a shared_ptr: starts the watchdog.
  virtual void start();

 private:
  /// Stops both threads and joins them (detaches the calling one). Idempotent.
  void stop_threads();
  void watchdog(std::stop_token stop);
  /// Reports each lock lost when its local deadline passes, whatever the watchdog's I/O is doing.
  void deadline_timer(std::stop_token stop);

  std::string owner_id_;
  std::condition_variable_any wake_watchdog_;
  std::atomic<std::uint64_t> acquired_{0}, contended_{0}, timeouts_{0}, renewals_{0}, lost_{0}, retried_{0},
      combined_{0}, written_behind_{0}, grants_unread_{0};
  std::atomic<std::int64_t> waited_ms_{0};
  std::mutex timer_mutex_;
  std::condition_variable_any wake_timer_;
  std::vector<std::pair<std::shared_ptr<HeldLock>, std::string>> lost_later_;  // guarded by timer_mutex_
  // Guarded by timer_mutex_: when the timer wakes next (max() while it plans a round: any deadline
  // may be sooner), and whether watch_deadline() found one sooner.
  SteadyClock::time_point timer_wakes_at_ = SteadyClock::time_point::max();
  bool sooner_deadline_ = false;
  bool timer_stopped_ = false;  // guarded by timer_mutex_: stop_threads() joined the timer
  std::atomic<std::thread::id> callback_free_thread_{};
  const std::function<void(const LockEvent&)>* event_tap_ = nullptr;  // the store's (dblock::testing), or null
  // With a local clock: the watchdog's and the timer's registrations as its waiters.
  std::shared_ptr<ManualClock::Waiter> watchdog_waiter_, timer_waiter_;
  std::weak_ptr<ManagerBase> user_handle_;  // set by start_for_users
  std::jthread watchdog_;                   // last two: joined before the members above go
  std::jthread timer_;
};

}  // namespace dblock::detail
