#include "asio/async_engine.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <dblock/errors.hpp>
#include <dblock/text.hpp>

#include "core/advisory_core.hpp"
#include "core/owner_id.hpp"
#include "core/store_parts.hpp"
#include "core/table_core.hpp"

namespace dblock::detail {

std::exception_ptr aborted_error() {
  return std::make_exception_ptr(asio::system_error(asio::error::operation_aborted));
}

namespace {

/// What the synchronous acquire rides out while it waits: the database unreachable, or conflicts
/// that outlasted their retries.
bool rides_out(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const ConnectionError&) {
    return true;
  } catch (const TransientError&) {
    return true;
  } catch (...) {
    return false;
  }
}

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

AsyncEngine::AsyncEngine(std::shared_ptr<Store> store, ManagerOptions options, AsyncOptions async)
    : options_(options),
      async_(async),
      signals_(std::make_shared<Signals>()),
      pool_(std::max<std::size_t>(async.threads, 1)) {
  if (!store) throw InvalidArgument("AsyncLockManager needs a Store (got a null pointer)");
  if (async.notified_poll.count() <= 0) throw InvalidArgument("AsyncOptions.notified_poll must be positive");
  // Advisory locks send no release notifications: their waiters poll (and hear local releases).
  auto* notifications =
      options.mode == LockMode::advisory ? nullptr : StoreParts::backend(*store).notifications().get_if();
  signals_->board = std::make_unique<WakeBoard>(notifications, StoreParts::logger(*store));
  std::weak_ptr<Signals> weak = signals_;
  auto user_event = options.on_event;
  options.on_event = [weak, user_event](const LockEvent& event) {
    if (user_event) user_event(event);
    if (event.kind != LockEventKind::released || event.count > 0) return;
    // A release of ours frees the name: the next waiter here need not wait for a poll, nor for
    // the database's notification to come round.
    if (auto signals = weak.lock()) signals->board->released(event.name);
  };
  auto user_lost = options.on_lost;
  options.on_lost = [weak, user_lost](std::string_view name, std::int64_t token) {
    if (user_lost) user_lost(name, token);
    auto signals = weak.lock();
    if (!signals) return;
    std::vector<std::function<void()>> checks;
    {
      std::lock_guard lock(signals->mutex);
      auto [from, to] = signals->lost_checks.equal_range(name);
      for (auto it = from; it != to; ++it) checks.push_back(it->second.second);
    }
    for (auto& check : checks) check();
  };
  std::shared_ptr<ManagerBase> core;
  if (options.mode == LockMode::advisory)
    core = std::make_shared<AdvisoryCore>(std::move(store), std::move(options));
  else
    core = std::make_shared<TableCore>(std::move(store), std::move(options));
  core_ = ManagerBase::start_for_users(std::move(core));
}

AsyncEngine::~AsyncEngine() { close(); }

bool AsyncEngine::track(const std::shared_ptr<Cancellable>& operation) {
  std::lock_guard lock(mutex_);
  if (closed_) return false;
  operations_.emplace(operation.get(), operation);
  return true;
}

void AsyncEngine::untrack(const Cancellable* operation) {
  std::lock_guard lock(mutex_);
  operations_.erase(operation);
}

void AsyncEngine::close() {
  std::vector<std::shared_ptr<Cancellable>> live;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    closed_ = true;
    for (auto& [key, weak] : operations_)
      if (auto operation = weak.lock()) live.push_back(std::move(operation));
  }
  for (auto& operation : live) operation->cancel();
  live.clear();
  pool_.join();  // the statements in flight end, and their grants, now unwanted, are released
  // The listener reads the store's backend, which may go with core_ right after this.
  signals_->board->stop_listening();
}

void AsyncEngine::watch_lost(const std::string& name, const std::shared_ptr<Cancellable>& waiter,
                             std::function<void()> check) {
  std::lock_guard lock(signals_->mutex);
  signals_->lost_checks.emplace(name, std::make_pair(waiter.get(), std::move(check)));
}

void AsyncEngine::unwatch_lost(const std::string& name, const Cancellable* waiter) {
  std::lock_guard lock(signals_->mutex);
  auto [from, to] = signals_->lost_checks.equal_range(name);
  for (auto it = from; it != to; ++it)
    if (it->second.first == waiter) {
      signals_->lost_checks.erase(it);
      return;
    }
}

AcquireOp::AcquireOp(std::shared_ptr<AsyncEngine> engine, std::string name, LockOptions options, std::uint64_t owner,
                     std::optional<std::chrono::milliseconds> timeout, Done done)
    : engine_(std::move(engine)),
      name_(std::move(name)),
      options_(options),
      owner_(owner),
      timeout_(timeout ? std::optional(std::min(*timeout, wait_forever)) : std::nullopt),
      exclusive_(!options.shared && options.permits == 0),
      deadline_(SteadyClock::now() + timeout_.value_or(std::chrono::milliseconds(0))),
      done_(std::move(done)),
      timer_(engine_->pool().get_executor()),
      backoff_(engine_->options().backoff_initial, engine_->options().backoff_factor, engine_->options().backoff_max,
               owner ^ static_cast<std::uint64_t>(SteadyClock::now().time_since_epoch().count())) {}

void AcquireOp::start() {
  std::unique_lock guard(mutex_);
  if (state_ == State::done) return;  // cancelled between its creation and its start (a lock set's step)
  if (timeout_ && timeout_->count() < 0) {
    finish(guard, std::make_exception_ptr(InvalidArgument(fmt::format("timeout {}ms is negative", timeout_->count()))),
           std::nullopt);
    return;
  }
  if (!engine_->track(shared_from_this())) {
    finish(guard, aborted_error(), std::nullopt);
    return;
  }
  if (timeout_ && timeout_->count() > 0) {
    // On the board before the first try: a release during it is not missed.
    registered_ = true;
    engine_->board().enter(name_, shared_from_this());
    // Behind other waiters of ours for the same name, a try now would only find it taken: wait for
    // the wake-up of a release (or to become the poller) instead. Groups may admit several: try.
    if (exclusive_ && !engine_->board().is_poller(name_, this)) {
      arm(guard, false);
      return;
    }
  }
  run_statement(guard);
}

void AcquireOp::run_statement(std::unique_lock<std::mutex>&) {
  state_ = State::statement;
  asio::post(engine_->pool(), [self = shared_from_this()] {
    std::optional<Lock> lock;
    std::exception_ptr error;
    try {
      ScopedOwnerNonce as_task(self->owner_);
      lock = self->engine_->core().try_acquire(self->name_, self->options_.get());
    } catch (...) {
      error = std::current_exception();
    }
    self->on_result(std::move(lock), std::move(error));
  });
}

void AcquireOp::on_result(std::optional<Lock> lock, std::exception_ptr error) {
  std::unique_lock guard(mutex_);
  if (state_ == State::done) {
    // Cancelled while the statement ran: the grant is nobody's, so it goes back at once.
    guard.unlock();
    lock.reset();
    return;
  }
  if (lock) {
    bool shareable = !exclusive_;
    finish(guard, nullptr, std::move(lock));
    if (shareable) engine_->board().released(name_);  // a group may admit the next one too
    return;
  }
  bool waits = timeout_ && timeout_->count() > 0;
  if (error) {
    if (!waits || !rides_out(error)) {
      finish(guard, std::move(error), std::nullopt);
      return;
    }
    last_error_ = what_of(error);
  }
  if (!timeout_) {
    finish(guard, nullptr, std::nullopt);  // a try that found the name taken
    return;
  }
  if (SteadyClock::now() >= deadline_) {
    finish(guard, timeout_error(), std::nullopt);
    return;
  }
  if (wake_pending_) {
    wake_pending_ = false;
    run_statement(guard);
    return;
  }
  engine_->board().rest(name_, this);
  arm(guard, error != nullptr);
}

void AcquireOp::arm(std::unique_lock<std::mutex>&, bool after_error) {
  auto now = SteadyClock::now();
  auto wake_at = deadline_;
  auto& board = engine_->board();
  if (after_error || !exclusive_ || board.is_poller(name_, this)) {
    auto interval = !after_error && board.notifying() ? engine_->async_options().notified_poll : backoff_.next();
    wake_at = std::min(deadline_, now + interval);
  }
  state_ = State::waiting;
  auto generation = ++generation_;
  timer_.expires_at(wake_at);
  timer_.async_wait([self = shared_from_this(), generation](const std::error_code&) { self->on_timer(generation); });
}

void AcquireOp::on_timer(std::uint64_t generation) {
  std::unique_lock guard(mutex_);
  if (state_ != State::waiting || generation != generation_) return;  // woken, re-armed or ended meanwhile
  if (SteadyClock::now() >= deadline_) {
    finish(guard, timeout_error(), std::nullopt);
    return;
  }
  run_statement(guard);
}

void AcquireOp::wake() {
  std::unique_lock guard(mutex_);
  if (state_ == State::waiting) {
    ++generation_;
    timer_.cancel();
    run_statement(guard);
  } else if (state_ != State::done) {
    wake_pending_ = true;
  }
}

void AcquireOp::promote() {
  std::unique_lock guard(mutex_);
  if (state_ == State::waiting) arm(guard, false);
}

void AcquireOp::cancel() {
  std::unique_lock guard(mutex_);
  if (state_ == State::done) return;
  finish(guard, aborted_error(), std::nullopt);
}

void AcquireOp::finish(std::unique_lock<std::mutex>& guard, std::exception_ptr error, std::optional<Lock> lock) {
  bool granted = lock.has_value();
  state_ = State::done;
  ++generation_;
  timer_.cancel();
  auto done = std::move(done_);
  bool registered = std::exchange(registered_, false);
  guard.unlock();
  if (registered) engine_->board().leave(name_, this, granted);
  engine_->untrack(this);
  if (done) done(std::move(error), std::move(lock));
}

std::exception_ptr AcquireOp::timeout_error() const {
  return std::make_exception_ptr(
      Timeout(fmt::format("lock '{}' was not acquired within {}{}", terminal_safe(name_), format_duration(*timeout_),
                          last_error_.empty() ? "" : "; last database error: " + last_error_)));
}

}  // namespace dblock::detail
