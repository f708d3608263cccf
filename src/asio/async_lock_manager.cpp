#include <dblock/asio.hpp>

#include <algorithm>
#include <random>

#include <dblock/errors.hpp>

#include "asio/async_engine.hpp"
#include "asio/delivery.hpp"
#include "core/owner_id.hpp"

namespace dblock {

using detail::AcquireOp;
using detail::AsyncAccess;
using detail::Delivery;

TaskOwner::TaskOwner() {
  std::random_device device;
  key_ = ((static_cast<std::uint64_t>(device()) << 32) ^ device()) | 1;  // never 0: that is the manager's owner
}

AsyncLockManager::AsyncLockManager(executor_type executor, std::shared_ptr<Store> store, ManagerOptions options,
                                   AsyncOptions async)
    : executor_(std::move(executor)),
      engine_(std::make_shared<detail::AsyncEngine>(std::move(store), std::move(options), async)) {}

AsyncLockManager::~AsyncLockManager() { engine_->close(); }

std::string AsyncLockManager::owner_id(const TaskOwner& owner) const {
  detail::ScopedOwnerNonce as_task(owner.key());
  return engine_->core().owner_for_this_thread();
}

ManagerStats AsyncLockManager::stats() const { return engine_->core().stats(); }

namespace {

template <class Operation, class DeliveryPtr>
void cancel_through(const DeliveryPtr& delivery, const std::shared_ptr<Operation>& operation) {
  delivery->on_cancel([weak = std::weak_ptr<Operation>(operation)] {
    if (auto alive = weak.lock()) alive->cancel();
  });
}

/// acquire_all: the names in the order of their bytes, each awaited in turn with what is left of
/// the timeout, every lock taken held meanwhile; on any failure they are released, the last first.
class AcquireAllOp final : public detail::Cancellable, public std::enable_shared_from_this<AcquireAllOp> {
 public:
  using Done = std::function<void(std::exception_ptr, std::optional<LockSet>)>;
  AcquireAllOp(std::shared_ptr<detail::AsyncEngine> engine, std::vector<std::string> names,
               std::chrono::milliseconds timeout, std::uint64_t owner, LockOptions options, Done done)
      : engine_(std::move(engine)),
        names_(std::move(names)),
        deadline_(std::chrono::steady_clock::now() + std::min(timeout, wait_forever)),
        timeout_(timeout),
        owner_(owner),
        options_(options),
        done_(std::move(done)) {
    std::sort(names_.begin(), names_.end());
    names_.erase(std::unique(names_.begin(), names_.end()), names_.end());
  }

  void start() {
    if (names_.empty()) return fail(std::make_exception_ptr(InvalidArgument("acquire_all needs at least one name")));
    if (timeout_.count() < 0)
      return fail(std::make_exception_ptr(InvalidArgument("acquire_all: the timeout is negative")));
    next();
  }

  void cancel() override {
    std::shared_ptr<AcquireOp> step;
    {
      std::lock_guard lock(mutex_);
      cancelled_ = true;
      step = step_;
    }
    if (step) step->cancel();
  }

 private:
  void next() {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    std::shared_ptr<AcquireOp> step;
    {
      std::lock_guard lock(mutex_);
      if (cancelled_) {
        step_.reset();
      } else {
        step_ = std::make_shared<AcquireOp>(
            engine_, names_[taken_.size()], options_.get(), owner_, std::max(left, std::chrono::milliseconds(0)),
            [self = shared_from_this()](std::exception_ptr error, std::optional<Lock> lock) {
              self->on_step(std::move(error), std::move(lock));
            });
        step = step_;
      }
    }
    if (!step) return fail(detail::aborted_error());
    step->start();
  }

  void on_step(std::exception_ptr error, std::optional<Lock> lock) {
    if (error) return fail(std::move(error));
    taken_.push_back(std::move(*lock));
    if (taken_.size() < names_.size()) return next();
    auto done = std::move(done_);
    done(nullptr, AsyncAccess::make_set(std::move(taken_)));
  }

  void fail(std::exception_ptr error) {
    while (!taken_.empty()) taken_.pop_back();  // releases, the last taken first
    auto done = std::move(done_);
    if (done) done(std::move(error), std::nullopt);
  }

  std::shared_ptr<detail::AsyncEngine> engine_;
  std::vector<std::string> names_;
  const std::chrono::steady_clock::time_point deadline_;
  const std::chrono::milliseconds timeout_;
  const std::uint64_t owner_;
  const detail::KeptOptions options_;
  Done done_;
  std::vector<Lock> taken_;  // touched by one step's completion at a time
  std::mutex mutex_;
  bool cancelled_ = false;
  std::shared_ptr<AcquireOp> step_;
};

/// Waits for a guard's lock to be reported lost.
class LostWait final : public detail::Cancellable, public std::enable_shared_from_this<LostWait> {
 public:
  LostWait(std::shared_ptr<detail::AsyncEngine> engine, std::shared_ptr<detail::HeldLock> held,
           std::shared_ptr<Delivery<std::error_code>> delivery)
      : engine_(std::move(engine)), held_(std::move(held)), delivery_(std::move(delivery)) {}

  void start() {
    if (!engine_->track(shared_from_this())) return end(asio::error::operation_aborted);
    // The watch keeps this alive until end() takes it back.
    engine_->watch_lost(held_->name, shared_from_this(), [self = shared_from_this()] { self->check(); });
    check();  // lost before the watch was in place
  }
  void cancel() override { end(asio::error::operation_aborted); }

 private:
  void check() {
    if (!held_->believed_held(engine_->core().local_now())) end({});
  }
  void end(std::error_code code) {
    if (ended_.exchange(true)) return;
    engine_->unwatch_lost(held_->name, this);
    engine_->untrack(this);
    delivery_->deliver(code);
  }

  std::shared_ptr<detail::AsyncEngine> engine_;
  std::shared_ptr<detail::HeldLock> held_;
  std::shared_ptr<Delivery<std::error_code>> delivery_;
  std::atomic<bool> ended_{false};
};

}  // namespace

void AsyncLockManager::start_acquire(std::string name, std::chrono::milliseconds timeout, TaskOwner owner,
                                     LockOptions options, detail::AsyncTarget target,
                                     std::function<LockSignature> done) {
  auto delivery = Delivery<std::exception_ptr, Lock>::make(std::move(target), std::move(done));
  auto op = std::make_shared<AcquireOp>(engine_, std::move(name), options, owner.key(), timeout,
                                        [delivery](std::exception_ptr error, std::optional<Lock> lock) {
                                          delivery->deliver(std::move(error),
                                                            lock ? std::move(*lock) : AsyncAccess::empty_lock());
                                        });
  cancel_through(delivery, op);
  op->start();
}

void AsyncLockManager::start_try_acquire(std::string name, TaskOwner owner, LockOptions options,
                                         detail::AsyncTarget target, std::function<MaybeLockSignature> done) {
  auto delivery = Delivery<std::exception_ptr, std::optional<Lock>>::make(std::move(target), std::move(done));
  auto op = std::make_shared<AcquireOp>(engine_, std::move(name), options, owner.key(), std::nullopt,
                                        [delivery](std::exception_ptr error, std::optional<Lock> lock) {
                                          delivery->deliver(std::move(error), std::move(lock));
                                        });
  cancel_through(delivery, op);
  op->start();
}

void AsyncLockManager::start_acquire_all(std::vector<std::string> names, std::chrono::milliseconds timeout,
                                         TaskOwner owner, LockOptions options, detail::AsyncTarget target,
                                         std::function<LockSetSignature> done) {
  auto delivery = Delivery<std::exception_ptr, LockSet>::make(std::move(target), std::move(done));
  auto op = std::make_shared<AcquireAllOp>(engine_, std::move(names), timeout, owner.key(), options,
                                           [delivery](std::exception_ptr error, std::optional<LockSet> locks) {
                                             delivery->deliver(std::move(error),
                                                               locks ? std::move(*locks) : AsyncAccess::make_set({}));
                                           });
  cancel_through(delivery, op);
  op->start();
}

namespace {

template <class Guard>
void release_on_pool(detail::AsyncEngine& engine, Guard guard, detail::AsyncTarget target,
                     std::function<void(std::exception_ptr)> done) {
  auto delivery = Delivery<std::exception_ptr>::make(std::move(target), std::move(done));
  auto release = [delivery, guard = std::make_shared<Guard>(std::move(guard))] {
    try {
      guard->release();
      delivery->deliver(nullptr);
    } catch (...) {
      delivery->deliver(std::current_exception());
    }
  };
  asio::post(engine.pool(), std::move(release));
}

}  // namespace

void AsyncLockManager::start_release(Lock lock, detail::AsyncTarget target, std::function<DoneSignature> done) {
  release_on_pool(*engine_, std::move(lock), std::move(target), std::move(done));
}

void AsyncLockManager::start_release(LockSet locks, detail::AsyncTarget target, std::function<DoneSignature> done) {
  release_on_pool(*engine_, std::move(locks), std::move(target), std::move(done));
}

void AsyncLockManager::start_wait_lost(const Lock& lock, detail::AsyncTarget target,
                                       std::function<LostSignature> done) {
  auto delivery = Delivery<std::error_code>::make(std::move(target), std::move(done));
  const auto& held = AsyncAccess::held(lock);
  if (!held) {
    delivery->deliver(asio::error::operation_aborted);  // a released or moved-from guard has nothing to lose
    return;
  }
  auto wait = std::make_shared<LostWait>(engine_, held, delivery);
  cancel_through(delivery, wait);
  wait->start();
}

}  // namespace dblock
