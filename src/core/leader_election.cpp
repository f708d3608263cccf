// LeaderElection: a campaign thread over a LockManager of its own. A term is the lifetime of
// one grant of the name's lock; the manager's on_lost ends it no later than the lock's local
// deadline, so a leader hears of its loss before the database can elect anybody else.

#include <dblock/leader_election.hpp>

#include <dblock/errors.hpp>
#include <dblock/lock_manager.hpp>

#include <spdlog/spdlog.h>

#include "base/validate.hpp"
#include "core/store_parts.hpp"

namespace dblock {

namespace {

template <class Callback, class... Args>
void call_quietly(spdlog::logger& logger, std::string_view what, const Callback& callback, Args... args) noexcept {
  if (!callback) return;
  try {
    callback(args...);
  } catch (const std::exception& e) {
    logger.error("{} callback threw: {}", what, e.what());
  } catch (...) {
    logger.error("{} callback threw", what);
  }
}

}  // namespace

LeaderElection::LeaderElection(std::shared_ptr<Store> store, std::string name, ElectionOptions options)
    : name_(std::move(name)), options_(std::move(options)) {
  if (!store) throw InvalidArgument("LeaderElection needs a Store (got a null pointer)");
  detail::validate_lock_name(name_);
  if (options_.campaign_slice.count() <= 0) throw InvalidArgument("campaign_slice must be positive");
  if (options_.retry_after_error.count() <= 0) throw InvalidArgument("retry_after_error must be positive");
  logger_ = detail::StoreParts::logger(*store);
  auto manager_options = options_.manager;
  manager_options.on_lost = [this, user_on_lost = options_.manager.on_lost](std::string_view lost_name,
                                                                            std::int64_t token) {
    if (user_on_lost) user_on_lost(lost_name, token);
    lock_lost(token);
  };
  manager_ = std::make_unique<LockManager>(std::move(store), std::move(manager_options));
  campaigner_ = std::jthread([this](std::stop_token stop) { campaign(std::move(stop)); });
}

LeaderElection::~LeaderElection() { resign(); }

bool LeaderElection::is_leader() const {
  std::lock_guard state(state_);
  return term_ && !term_->lost();
}

std::optional<std::int64_t> LeaderElection::token() const {
  std::lock_guard state(state_);
  if (!term_ || term_->lost()) return std::nullopt;
  return term_->token();
}

std::uint64_t LeaderElection::terms() const {
  std::lock_guard state(state_);
  return terms_;
}

void LeaderElection::resign() noexcept {
  campaigner_.request_stop();
  if (campaigner_.joinable()) campaigner_.join();
  std::optional<Lock> ended;
  {
    std::lock_guard callbacks(callbacks_);
    {
      std::lock_guard state(state_);
      ended = std::exchange(term_, std::nullopt);
      if (ended_by_loss_) ended_by_loss_.reset();  // its revocation was reported when it was lost
    }
    if (ended) call_quietly(*logger_, "on_revoked", options_.on_revoked);
  }
  if (!ended) return;
  try {
    ended->release();  // at once, so that another campaigner need not wait for the lease
  } catch (const std::exception& e) {
    logger_->warn("resigning the leadership of '{}': {}", name_, e.what());
  }
}

void LeaderElection::lock_lost(std::int64_t token) {
  std::lock_guard callbacks(callbacks_);
  {
    std::lock_guard state(state_);
    if (!term_ || term_->token() != token) return;
    // The campaign thread drops the lost guard: its release statement must not hold up this
    // watchdog or timer thread.
    ended_by_loss_ = std::exchange(term_, std::nullopt);
  }
  wake_.notify_all();
  call_quietly(*logger_, "on_revoked", options_.on_revoked);
}

void LeaderElection::campaign(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::optional<Lock> granted;
    try {
      granted.emplace(manager_->acquire(name_, options_.campaign_slice));
    } catch (const Timeout&) {
      continue;
    } catch (const std::exception& e) {
      logger_->warn("campaigning for '{}' failed, trying again in {} ms: {}", name_, options_.retry_after_error.count(),
                    e.what());
      std::unique_lock state(state_);
      wake_.wait_for(state, stop, options_.retry_after_error, [] { return false; });
      continue;
    }
    std::int64_t token = 0;
    try {
      token = granted->token();  // advisory mode draws it now, on the lock's session
    } catch (const LockLost&) {
      continue;  // lost before the term began: campaign again
    }
    {
      std::lock_guard callbacks(callbacks_);
      {
        std::lock_guard state(state_);
        // Lost before the term began: its on_lost found no term to end; campaign again.
        if (stop.stop_requested() || granted->lost()) continue;
        term_ = std::move(granted);
        ++terms_;
      }
      call_quietly(*logger_, "on_elected", options_.on_elected, token);
    }
    std::optional<Lock> ended;
    {
      std::unique_lock state(state_);
      wake_.wait(state, stop, [&] { return !term_; });
      ended = std::exchange(ended_by_loss_, std::nullopt);
    }
    // A lost guard's release finds the lock gone (LockLost) and changes nothing in the database.
    if (ended) {
      try {
        ended->release();
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace dblock
