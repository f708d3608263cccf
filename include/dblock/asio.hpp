#pragma once
/// AsyncLockManager: dblock's locks for asio services (standalone asio 1.22, `<asio.hpp>`).
/// Initiating functions take a completion token, so one call serves callbacks, asio::use_future
/// and asio::use_awaitable:
///
///   dblock::AsyncLockManager locks(io.get_executor(), store);
///   asio::co_spawn(io, [&]() -> asio::awaitable<void> {
///     dblock::TaskOwner me;  // this task's identity, wherever it resumes
///     auto lock = co_await locks.async_acquire("orders/42", 5s, me, {}, asio::use_awaitable);
///     co_await serve(lock.token());
///   }, asio::detached);
///
/// Owners: every operation acts for a TaskOwner, never for a thread. The short forms (no owner
/// argument) draw a fresh owner per call, so two of them never re-enter each other's lock; a
/// task that wants re-entry passes the same TaskOwner again. Under OwnerScope::manager every task
/// of the manager shares the manager's owner, as every thread does with LockManager.
///
/// Waiting costs no thread: a waiting operation is a timer on the manager's statement threads,
/// woken by PostgreSQL's release notifications (or, elsewhere, by this manager's own releases and
/// by polling with the backoff of ManagerOptions, done by the oldest waiter of each name only).
/// Statements run on AsyncOptions::threads threads, one blocking round trip each at a time.
///
/// Completion: as if by asio::post to the handler's associated executor (default: the manager's).
/// Failures arrive as the std::exception_ptr of the signature (co_await rethrows it): the
/// dblock::Error that LockManager would throw, or asio::system_error(operation_aborted) when the
/// operation was cancelled (per-operation cancellation, any type) or the manager destroyed. A
/// grant that lands after cancellation is released, never delivered. When the handler's
/// execution context is destroyed (e.g. after io_context::stop()) before completion, pending
/// operations are abandoned and every guard not yet delivered is released.
///
/// Guards are the synchronous API's Lock and LockSet: their destructor releases on the thread that
/// destroys them (one blocking round trip); async_release does it on the statement threads.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <asio.hpp>

#include <dblock/lock.hpp>
#include <dblock/lock_manager.hpp>
#include <dblock/lock_set.hpp>
#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include <dblock/export.hpp>

namespace dblock {

/// The identity of one task (a coroutine, a request, a session of a protocol): the owner its
/// acquisitions are written under and the one re-entry is judged by. Copies are the same owner;
/// each default-constructed TaskOwner is a new one. Cheap to copy; thread-safe.
class DBLOCK_EXPORT TaskOwner {
 public:
  TaskOwner();
  [[nodiscard]] std::uint64_t key() const noexcept { return key_; }
  friend bool operator==(const TaskOwner&, const TaskOwner&) = default;

 private:
  std::uint64_t key_;
};

struct AsyncOptions {
  /// Threads that run statements and the waiters' timers. Each runs one blocking round trip at a
  /// time, so more threads than the store's pool has sessions only queue. Default: 2.
  std::size_t threads = 2;
  /// PostgreSQL, while release notifications arrive: how often the oldest waiter of a name still
  /// tries on its own (a lease that ended without a release sends none). Default: 1 s.
  std::chrono::milliseconds notified_poll{1000};
};

namespace detail {
class AsyncEngine;

/// Where an operation completes: the handler's executor and cancellation slot.
struct AsyncTarget {
  asio::any_io_executor executor;
  asio::cancellation_slot slot;
};

template <class Signature>
struct ErasedHandler;

/// Asio handlers are move-only; the library's compiled part takes a copyable std::function.
template <class... Args>
struct ErasedHandler<void(Args...)> {
  using type = std::function<void(Args...)>;
  template <class Handler>
  static type erase(Handler&& handler) {
    auto shared = std::make_shared<std::decay_t<Handler>>(std::forward<Handler>(handler));
    return [shared](Args... args) { std::move (*shared)(std::move(args)...); };
  }
};
}  // namespace detail

class DBLOCK_EXPORT AsyncLockManager {
 public:
  using executor_type = asio::any_io_executor;
  using LockSignature = void(std::exception_ptr, Lock);
  using MaybeLockSignature = void(std::exception_ptr, std::optional<Lock>);
  using LockSetSignature = void(std::exception_ptr, LockSet);
  using DoneSignature = void(std::exception_ptr);
  using LostSignature = void(std::error_code);

  /// `executor`: where handlers without an executor of their own complete.
  /// @throws what the LockManager constructor throws (InvalidArgument, SchemaError).
  AsyncLockManager(executor_type executor, std::shared_ptr<Store> store, ManagerOptions options = {},
                   AsyncOptions async = {});
  /// Cancels every operation in progress (they complete with operation_aborted) and waits for the
  /// statements in flight (bounded by the statement timeout). Guards already delivered stay valid.
  ~AsyncLockManager();
  AsyncLockManager(const AsyncLockManager&) = delete;
  AsyncLockManager& operator=(const AsyncLockManager&) = delete;

  [[nodiscard]] executor_type get_executor() const noexcept { return executor_; }
  /// The owner id written into rows for `owner`.
  [[nodiscard]] std::string owner_id(const TaskOwner& owner) const;
  [[nodiscard]] ManagerStats stats() const;

  /// Waits up to `timeout` (0: one try; wait_forever) for `name`. Completes with the guard, or
  /// with Timeout, or with what LockManager::acquire throws. Signature: LockSignature.
  template <class Token>
  auto async_acquire(std::string_view name, std::chrono::milliseconds timeout, const TaskOwner& owner,
                     LockOptions options, Token&& token) {
    return asio::async_initiate<Token, LockSignature>(
        [this](auto handler, std::string name, std::chrono::milliseconds timeout, TaskOwner owner,
               LockOptions options) {
          auto target = this->target_of(handler);
          start_acquire(std::move(name), timeout, owner, options, std::move(target),
                        detail::ErasedHandler<LockSignature>::erase(std::move(handler)));
        },
        token, std::string(name), timeout, owner, options);
  }
  /// A fresh owner for this acquisition alone.
  template <class Token>
  auto async_acquire(std::string_view name, std::chrono::milliseconds timeout, Token&& token) {
    return async_acquire(name, timeout, TaskOwner(), LockOptions{}, std::forward<Token>(token));
  }

  /// One try: an empty optional when another owner holds a live lease. MaybeLockSignature.
  template <class Token>
  auto async_try_acquire(std::string_view name, const TaskOwner& owner, LockOptions options, Token&& token) {
    return asio::async_initiate<Token, MaybeLockSignature>(
        [this](auto handler, std::string name, TaskOwner owner, LockOptions options) {
          auto target = this->target_of(handler);
          start_try_acquire(std::move(name), owner, options, std::move(target),
                            detail::ErasedHandler<MaybeLockSignature>::erase(std::move(handler)));
        },
        token, std::string(name), owner, options);
  }
  template <class Token>
  auto async_try_acquire(std::string_view name, Token&& token) {
    return async_try_acquire(name, TaskOwner(), LockOptions{}, std::forward<Token>(token));
  }

  /// All or nothing, like LockManager::acquire_all: names taken one by one in the order of their
  /// bytes, waiting up to `timeout` in total; on failure or cancellation what was taken is
  /// released before the completion. LockSetSignature.
  template <class Token>
  auto async_acquire_all(std::vector<std::string> names, std::chrono::milliseconds timeout, const TaskOwner& owner,
                         LockOptions options, Token&& token) {
    return asio::async_initiate<Token, LockSetSignature>(
        [this](auto handler, std::vector<std::string> names, std::chrono::milliseconds timeout, TaskOwner owner,
               LockOptions options) {
          auto target = this->target_of(handler);
          start_acquire_all(std::move(names), timeout, owner, options, std::move(target),
                            detail::ErasedHandler<LockSetSignature>::erase(std::move(handler)));
        },
        token, std::move(names), timeout, owner, options);
  }
  template <class Token>
  auto async_acquire_all(std::vector<std::string> names, std::chrono::milliseconds timeout, Token&& token) {
    return async_acquire_all(std::move(names), timeout, TaskOwner(), LockOptions{}, std::forward<Token>(token));
  }

  /// Leader election's campaign: waits without end (until cancelled) for `name` and completes
  /// with the term's guard; connection errors and conflicts are ridden out. Race the term's work
  /// against async_wait_lost(term) to learn when it ends. LockSignature.
  template <class Token>
  auto async_campaign(std::string_view name, const TaskOwner& owner, Token&& token) {
    return async_acquire(name, wait_forever, owner, LockOptions{}, std::forward<Token>(token));
  }

  /// Releases `lock` (one re-entrancy level) on the statement threads. What Lock::release
  /// throws arrives as the exception. DoneSignature.
  template <class Token>
  auto async_release(Lock lock, Token&& token) {
    return asio::async_initiate<Token, DoneSignature>(
        [this](auto handler, Lock lock) {
          auto target = this->target_of(handler);
          this->start_release(std::move(lock), std::move(target),
                              detail::ErasedHandler<DoneSignature>::erase(std::move(handler)));
        },
        token, std::move(lock));
  }
  template <class Token>
  auto async_release(LockSet locks, Token&& token) {
    return asio::async_initiate<Token, DoneSignature>(
        [this](auto handler, LockSet locks) {
          auto target = this->target_of(handler);
          this->start_release(std::move(locks), std::move(target),
                              detail::ErasedHandler<DoneSignature>::erase(std::move(handler)));
        },
        token, std::move(locks));
  }

  /// Completes (with no error) once `lock` is lost: its lease found gone, taken over, revoked,
  /// unrenewed at its local deadline, or its advisory session broken; at once when it already
  /// is. A release is not a loss: cancel the wait instead (asio::error::operation_aborted).
  /// `lock` must be a guard of this manager; the wait holds no reference to it. LostSignature.
  template <class Token>
  auto async_wait_lost(const Lock& lock, Token&& token) {
    return asio::async_initiate<Token, LostSignature>(
        [this](auto handler, const Lock* lock) {
          auto target = this->target_of(handler);
          start_wait_lost(*lock, std::move(target), detail::ErasedHandler<LostSignature>::erase(std::move(handler)));
        },
        token, &lock);
  }

 private:
  /// Handlers whose associated executor is not an I/O executor (asio::use_future's) complete on
  /// the manager's executor.
  template <class Handler>
  detail::AsyncTarget target_of(const Handler& handler) const {
    auto executor = asio::get_associated_executor(handler, executor_);
    if constexpr (std::is_convertible_v<decltype(executor), executor_type>)
      return {std::move(executor), asio::get_associated_cancellation_slot(handler)};
    else
      return {executor_, asio::get_associated_cancellation_slot(handler)};
  }
  void start_acquire(std::string name, std::chrono::milliseconds timeout, TaskOwner owner, LockOptions options,
                     detail::AsyncTarget target, std::function<LockSignature> done);
  void start_try_acquire(std::string name, TaskOwner owner, LockOptions options, detail::AsyncTarget target,
                         std::function<MaybeLockSignature> done);
  void start_acquire_all(std::vector<std::string> names, std::chrono::milliseconds timeout, TaskOwner owner,
                         LockOptions options, detail::AsyncTarget target, std::function<LockSetSignature> done);
  void start_release(Lock lock, detail::AsyncTarget target, std::function<DoneSignature> done);
  void start_release(LockSet locks, detail::AsyncTarget target, std::function<DoneSignature> done);
  void start_wait_lost(const Lock& lock, detail::AsyncTarget target, std::function<LostSignature> done);

  executor_type executor_;
  std::shared_ptr<detail::AsyncEngine> engine_;
};

}  // namespace dblock
