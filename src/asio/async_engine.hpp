#pragma once
// What an AsyncLockManager runs on: the lock core its guards belong to (the synchronous API's,
// reached with the task's owner in place of the thread's), the threads that run statements and
// timers, the wake board of its waiters, and the operations in progress, each a small state
// machine that holds no thread while it waits.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <asio.hpp>

#include <dblock/asio.hpp>

#include "asio/wake_board.hpp"
#include "core/backoff.hpp"
#include "core/manager_base.hpp"

namespace dblock::detail {

/// The guards' private parts that the asynchronous API needs (friend of Lock and LockSet).
struct AsyncAccess {
  static Lock empty_lock() { return Lock(nullptr, nullptr, 0); }
  static LockSet make_set(std::vector<Lock> locks) { return LockSet(std::move(locks)); }
  static const std::shared_ptr<HeldLock>& held(const Lock& lock) { return lock.held_; }
};

/// An operation in progress that the manager's end (or the caller) can stop.
class Cancellable {
 public:
  virtual ~Cancellable() = default;
  /// Completes the operation with operation_aborted unless it has completed. Any thread.
  virtual void cancel() = 0;
};

[[nodiscard]] std::exception_ptr aborted_error();

class AsyncEngine : public std::enable_shared_from_this<AsyncEngine> {
 public:
  AsyncEngine(std::shared_ptr<Store> store, ManagerOptions options, AsyncOptions async);
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  [[nodiscard]] ManagerBase& core() { return *core_; }
  [[nodiscard]] asio::thread_pool& pool() { return pool_; }
  [[nodiscard]] WakeBoard& board() { return *signals_->board; }
  [[nodiscard]] const ManagerOptions& options() const { return options_; }
  [[nodiscard]] const AsyncOptions& async_options() const { return async_; }

  /// Registers an operation for close(); false when closed (the caller then aborts it).
  bool track(const std::shared_ptr<Cancellable>& operation);
  void untrack(const Cancellable* operation);
  /// Cancels every operation in progress and waits for the statements in flight. Idempotent.
  void close();

  /// Calls `check` whenever a lock named `name` is reported lost, until unwatch_lost.
  void watch_lost(const std::string& name, const std::shared_ptr<Cancellable>& waiter, std::function<void()> check);
  void unwatch_lost(const std::string& name, const Cancellable* waiter);

 private:
  /// What the core's callbacks reach (weakly: guards outlive the engine).
  struct Signals {
    std::unique_ptr<WakeBoard> board;
    std::mutex mutex;
    std::multimap<std::string, std::pair<const Cancellable*, std::function<void()>>, std::less<>> lost_checks;
  };

  ManagerOptions options_;
  AsyncOptions async_;
  std::shared_ptr<Signals> signals_;
  std::shared_ptr<ManagerBase> core_;
  std::mutex mutex_;
  bool closed_ = false;
  std::unordered_map<const Cancellable*, std::weak_ptr<Cancellable>> operations_;
  asio::thread_pool pool_;  // last: joined by close() before anything above goes
};

/// LockOptions whose note (a view) points into text of its own: an operation outlives the
/// caller's text, which may be gone once the operation was started.
class KeptOptions {
 public:
  explicit KeptOptions(const LockOptions& options) : note_(options.note), options_(options) { options_.note = note_; }
  KeptOptions(const KeptOptions&) = delete;
  KeptOptions& operator=(const KeptOptions&) = delete;
  [[nodiscard]] const LockOptions& get() const noexcept { return options_; }

 private:
  std::string note_;
  LockOptions options_;
};

/// acquire and try_acquire of one name for one owner: try, then wait for a wake-up or a timer,
/// then try again, until granted, out of time or cancelled.
class AcquireOp final : public WakeBoard::Waiter, public Cancellable, public std::enable_shared_from_this<AcquireOp> {
 public:
  /// Called once, on any thread. `lock` empty: not granted (a try), or with an error.
  using Done = std::function<void(std::exception_ptr error, std::optional<Lock> lock)>;
  /// `timeout` empty: one try, whose refusal is an empty result rather than a Timeout.
  AcquireOp(std::shared_ptr<AsyncEngine> engine, std::string name, LockOptions options, std::uint64_t owner,
            std::optional<std::chrono::milliseconds> timeout, Done done);

  void start();
  void cancel() override;
  void wake() override;
  void promote() override;

 private:
  using SteadyClock = std::chrono::steady_clock;
  enum class State { idle, statement, waiting, done };

  void run_statement(std::unique_lock<std::mutex>& guard);
  void on_result(std::optional<Lock> lock, std::exception_ptr error);
  void arm(std::unique_lock<std::mutex>& guard, bool after_error);
  void on_timer(std::uint64_t generation);
  /// Ends the operation: unlocks `guard`, leaves the board and calls done_ once.
  void finish(std::unique_lock<std::mutex>& guard, std::exception_ptr error, std::optional<Lock> lock);
  [[nodiscard]] std::exception_ptr timeout_error() const;

  const std::shared_ptr<AsyncEngine> engine_;
  const std::string name_;
  const KeptOptions options_;
  const std::uint64_t owner_;
  const std::optional<std::chrono::milliseconds> timeout_;
  const bool exclusive_;
  const SteadyClock::time_point deadline_;
  Done done_;
  std::mutex mutex_;
  State state_ = State::idle;
  bool wake_pending_ = false;     // a wake-up came while a statement was in flight
  bool registered_ = false;       // on the wake board
  std::uint64_t generation_ = 0;  // of the timer's current wait; older expiries are ignored
  asio::steady_timer timer_;
  Backoff backoff_;
  std::string last_error_;
};

}  // namespace dblock::detail
