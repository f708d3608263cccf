// LeaderElection: a campaign thread over a LockManager of its own. A term is the lifetime of
// one grant of the name's lock; the manager's on_lost ends it no later than the lock's local
// deadline, so a leader hears of its loss before the database can elect anybody else.

#include <dblock/leader_election.hpp>

#include <dblock/errors.hpp>
#include <dblock/lock_manager.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/scope_exit.hpp"
#include "base/validate.hpp"
#include "core/manual_clock.hpp"
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
    : store_(store), name_(std::move(name)), options_(std::move(options)) {
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

std::optional<LeaderInfo> LeaderElection::leader(Store& store, std::string_view name) {
  auto row = store.lock(name);
  // Revoked, kept for a minimum hold or delayed: nobody leads until the name is granted again.
  if (!row || row->state != LockState::held || row->kind != HolderKind::exclusive || row->remaining.count() <= 0)
    return std::nullopt;
  auto since = std::chrono::system_clock::now() - row->held_for;
  return LeaderInfo{row->owner, row->token, std::chrono::time_point_cast<std::chrono::system_clock::duration>(since),
                    row->remaining};
}

std::optional<LeaderInfo> LeaderElection::leader() const { return leader(*store_, name_); }

ElectionHealth LeaderElection::health() const {
  auto interval =
      options_.manager.renew_interval.count() > 0 ? options_.manager.renew_interval : options_.manager.default_ttl / 3;
  std::lock_guard state(state_);
  if (term_ && !term_->lost()) {
    // The clock the term's deadline is on: dblock::testing's local clock on a test store.
    const auto& clock = detail::StoreParts::local_clock(*store_);
    auto now = clock ? clock->now() : std::chrono::steady_clock::now();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(term_->local_deadline() - now);
    // A renewal every interval keeps about ttl - interval of the lease left; less than one interval
    // means at least one renewal in a row failed or is stuck.
    if (term_->local_deadline() != std::chrono::steady_clock::time_point::max() && left < interval)
      return {false, true,
              fmt::format("leader of '{}' but its lease was not renewed on time: {} ms left", name_, left.count())};
    return {true, true, fmt::format("leader of '{}'", name_)};
  }
  if (!campaign_error_.empty())
    return {false, false, fmt::format("campaigning for '{}' fails: {}", name_, campaign_error_)};
  return {true, false, fmt::format("following: campaigning for '{}'", name_)};
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

std::string LeaderElection::owner_id() const {
  std::unique_lock state(state_);
  wake_.wait(state, [&] { return !campaign_owner_.empty(); });
  return campaign_owner_;
}

bool LeaderElection::hand_over(std::string_view successor) {
  if (!options_.manager.fair_queue || options_.manager.mode != LockMode::table)
    throw InvalidArgument("LeaderElection::hand_over needs ElectionOptions::manager.fair_queue (table mode)");
  detail::validate_owner_id(successor, "the successor's owner id");
  std::optional<Lock> ended;
  {
    std::lock_guard callbacks(callbacks_);
    {
      std::lock_guard state(state_);
      if (!term_ || term_->lost()) return false;
      ended = std::exchange(term_, std::nullopt);
      handing_over_ = true;  // the campaign thread, now owner of nothing, must not re-enter the lock
    }
    call_quietly(*logger_, "on_revoked", options_.on_revoked);
  }
  detail::ScopeExit campaign_again([this]() noexcept {
    {
      std::lock_guard state(state_);
      handing_over_ = false;
    }
    wake_.notify_all();
  });
  ended->hand_over(successor);
  logger_->info("handed the leadership of '{}' over (successor asked for: {})", name_, successor);
  return true;
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
  {
    std::lock_guard state(state_);
    campaign_owner_ = manager_->owner_id();
  }
  wake_.notify_all();
  while (!stop.stop_requested()) {
    std::optional<Lock> granted;
    try {
      // A fair campaign keeps its place in the queue: one wait, which a stop request ends.
      granted.emplace(options_.manager.fair_queue ? manager_->acquire(name_, wait_forever, {}, stop)
                                                  : manager_->acquire(name_, options_.campaign_slice));
    } catch (const Timeout&) {
      std::lock_guard state(state_);
      campaign_error_.clear();
      continue;
    } catch (const std::exception& e) {
      logger_->warn("campaigning for '{}' failed, trying again in {} ms: {}", name_, options_.retry_after_error.count(),
                    e.what());
      std::unique_lock state(state_);
      campaign_error_ = e.what();
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
        campaign_error_.clear();
        term_ = std::move(granted);
        ++terms_;
      }
      call_quietly(*logger_, "on_elected", options_.on_elected, token);
    }
    std::optional<Lock> ended;
    {
      std::unique_lock state(state_);
      wake_.wait(state, stop, [&] { return !term_ && !handing_over_; });
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

LeaderObserver::LeaderObserver(std::shared_ptr<Store> store, std::string name, ObserverOptions options)
    : store_(std::move(store)), name_(std::move(name)), options_(std::move(options)) {
  if (!store_) throw InvalidArgument("LeaderObserver needs a Store (got a null pointer)");
  detail::validate_lock_name(name_);
  if (options_.interval.count() <= 0) throw InvalidArgument("ObserverOptions.interval must be positive");
  thread_ = std::jthread([this](std::stop_token stop) { observe(std::move(stop)); });
}

LeaderObserver::~LeaderObserver() {
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

std::optional<LeaderInfo> LeaderObserver::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

std::uint64_t LeaderObserver::readings() const {
  std::lock_guard lock(mutex_);
  return readings_;
}

void LeaderObserver::observe(std::stop_token stop) {
  auto logger = detail::StoreParts::logger(*store_);
  bool first = true;
  while (!stop.stop_requested()) {
    std::optional<LeaderInfo> now;
    bool read = false;
    try {
      now = LeaderElection::leader(*store_, name_);
      read = true;
    } catch (const std::exception& e) {
      logger->warn("observing the leader of '{}': {}", name_, e.what());
    }
    if (read) {
      bool changed;
      {
        std::lock_guard lock(mutex_);
        changed = first || now.has_value() != current_.has_value() || (now && !now->same_term(*current_));
        current_ = now;
        ++readings_;
      }
      first = false;
      if (changed) call_quietly(*logger, "on_change", options_.on_change, now);
    }
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, stop, options_.interval, [] { return false; });
  }
}

}  // namespace dblock
