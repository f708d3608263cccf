#pragma once
// How an asynchronous operation hands its result to the caller: posted once to the handler's
// executor, with work tracked on it until then, and abandoned (the result dropped on the spot,
// which releases a guard in it) when the handler's execution context is being destroyed: a result
// posted to a destroyed context would never run, and a guard in it would stay held.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include <asio.hpp>

#include <dblock/asio.hpp>

namespace dblock::detail {

/// Something that must let go of an execution context before it is destroyed.
class ContextBound {
 public:
  virtual ~ContextBound() = default;
  /// The context is being destroyed: drop the handler and its executor, never post again.
  virtual void orphan() noexcept = 0;
};

/// One per execution context that handlers complete on: orphans what is pending there when the
/// context shuts down (its destructor), before the context's own services go.
class ContextWatch final : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;
  explicit ContextWatch(asio::execution_context& context) : asio::execution_context::service(context) {}

  /// False when the context is already shutting down (the caller then orphans `bound` itself).
  bool add(const std::shared_ptr<ContextBound>& bound);
  void remove(const ContextBound* bound);

 private:
  void shutdown() override;

  std::mutex mutex_;
  bool closed_ = false;
  std::map<const ContextBound*, std::weak_ptr<ContextBound>> pending_;
};

/// The caller's end of one operation. `cancel`: what a cancellation request (or the context's
/// end) does to the operation; it must tolerate being called after the operation finished.
template <class... Args>
class Delivery final : public ContextBound, public std::enable_shared_from_this<Delivery<Args...>> {
 public:
  static std::shared_ptr<Delivery> make(AsyncTarget target, std::function<void(Args...)> done) {
    auto delivery = std::shared_ptr<Delivery>(new Delivery(std::move(target), std::move(done)));
    auto& context = asio::query(delivery->executor_, asio::execution::context);
    delivery->watch_ = &asio::use_service<ContextWatch>(context);
    if (!delivery->watch_->add(delivery)) delivery->orphan();
    return delivery;
  }

  /// Connects the handler's cancellation slot to `cancel` (call once, before the operation can
  /// finish, on the initiating thread).
  void on_cancel(std::function<void()> cancel) {
    {
      std::lock_guard lock(mutex_);
      cancel_ = cancel;
    }
    if (slot_.is_connected()) slot_.assign([cancel = std::move(cancel)](asio::cancellation_type) { cancel(); });
  }

  /// Posts the result once; later calls and calls after orphan() drop their arguments here.
  void deliver(Args... args) {
    {
      std::lock_guard lock(mutex_);
      if (finished_) return;
      finished_ = true;
      // Posted while holding the mutex: orphan() (the context shutting down) waits for it, so the
      // post reaches the context's queue before the queue is torn down.
      asio::post(executor_, [done = std::move(done_), slot = slot_, ... args = std::move(args)]() mutable {
        if (slot.is_connected()) slot.clear();
        done(std::move(args)...);
      });
      executor_ = {};
      // Still under the mutex: once it is let go, a context shutting down may find this delivery
      // finished, end its orphan() at once and destroy the watch.
      watch_->remove(this);
    }
  }

  void orphan() noexcept override {
    std::function<void(Args...)> done;
    std::function<void()> cancel;
    asio::any_io_executor executor;
    {
      std::lock_guard lock(mutex_);
      if (finished_) return;
      finished_ = true;
      done = std::move(done_);
      executor = std::move(executor_);
      cancel = std::move(cancel_);
    }
    // The handler (a coroutine's frame, say) goes now, while its context still stands; the
    // operation stops, and what it was about to deliver is dropped by deliver().
    done = nullptr;
    executor = {};
    if (cancel) cancel();
  }

 private:
  Delivery(AsyncTarget target, std::function<void(Args...)> done)
      : executor_(asio::prefer(std::move(target.executor), asio::execution::outstanding_work.tracked)),
        slot_(target.slot),
        done_(std::move(done)) {}

  std::mutex mutex_;
  bool finished_ = false;
  asio::any_io_executor executor_;  // tracked: the context's run() waits for the result
  asio::cancellation_slot slot_;
  std::function<void(Args...)> done_;
  std::function<void()> cancel_;
  ContextWatch* watch_ = nullptr;
};

}  // namespace dblock::detail
