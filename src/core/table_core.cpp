// TableCore's acquisitions: a request checked and sent (alone or combined), a lost reply resolved by
// reading the row, and the wait for a name held by another owner.
#include "core/table_core.hpp"

#include <algorithm>
#include <exception>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/duration.hpp"
#include "base/scope_exit.hpp"
#include "base/validate.hpp"
#include "core/backoff.hpp"
#include "core/owner_id.hpp"
#include "core/release_hub.hpp"
#include "core/retry.hpp"
#include "core/store_parts.hpp"

namespace dblock::detail {

namespace {

constexpr std::chrono::milliseconds kNotifiedSafetyPoll{1000};
// Statements of each combiner out at once. One: the requests arriving meanwhile form the next
// batch. Two or more made smaller batches and fewer cycles per second at 16 threads on
// PostgreSQL (doc/performance.md, "Combining").
constexpr std::size_t kCombinedInFlight = 1;

}  // namespace

TableCore::TableCore(std::shared_ptr<Store> store, ManagerOptions options)
    : ManagerBase(std::move(store), std::move(options)),
      locks_(StoreParts::backend(*store_).locks()),
      groups_(StoreParts::backend(*store_).groups()) {
  store_->check_schema();
  if (options_.fair_queue) queue_ = &StoreParts::backend(*store_).queue().get();  // absent: InvalidArgument, why
  if (options_.combine_requests && locks_.max_batch() > 1)
    start_combining(CombinerLimits{locks_.max_batch(), kCombinedInFlight, StoreParts::connect_timeout(*store_)});
  // A release written behind would not hand the name on: the fair queue sends its own.
  if (options_.write_behind_releases && queue_ == nullptr)
    written_behind_ = std::make_unique<WriteBehind<std::shared_ptr<HeldLock>>>(
        locks_.max_batch(), StoreParts::connect_timeout(*store_),
        [this](const std::vector<std::shared_ptr<HeldLock>>& batch) { write_released(batch); });
  if (written_behind_) set_callback_free_thread(written_behind_->thread_id());
}

void TableCore::start_combining(CombinerLimits limits) {
  acquires_ = std::make_unique<Combiner<AcquireRequest, std::optional<Grant>>>(
      limits,
      [this](const AcquireRequest& r) {
        return locks_.try_acquire(r.name, r.owner, r.ttl, r.held_token, r.lock_delay);
      },
      [this](std::span<const AcquireRequest> requests) { return locks_.try_acquire_many(requests); });
  releases_ = std::make_unique<Combiner<ReleaseRequest, bool>>(
      limits, [this](const ReleaseRequest& r) { return locks_.release_last(r.name, r.owner, r.token).has_value(); },
      [this](std::span<const ReleaseRequest> requests) { return locks_.release_last_many(requests); });
}

TableCore::Request TableCore::request_of(const LockOptions& options) const {
  Request request;
  request.ttl = options.ttl.count() > 0 ? options.ttl : options_.default_ttl;
  if (options.ttl.count() < 0) throw InvalidArgument(fmt::format("ttl {}ms is negative", options.ttl.count()));
  validate_ttl(request.ttl, check_interval_);
  if (options.permits < 0) throw InvalidArgument(fmt::format("permits {} is negative", options.permits));
  if (options.permits > 0 && options.shared)
    throw InvalidArgument("a lock is either shared or one of a semaphore's permits, not both");
  if (options.permits > 0) request.kind = HolderKind::permit;
  if (options.shared) request.kind = HolderKind::shared;
  request.capacity = options.permits;
  if (options.min_hold.count() < 0)
    throw InvalidArgument(fmt::format("min_hold {}ms is negative", options.min_hold.count()));
  if (options.min_hold > std::chrono::days(30))
    throw InvalidArgument(fmt::format("min_hold {} is longer than 30 days", format_duration(options.min_hold)));
  if (options.min_hold.count() > 0 && request.kind != HolderKind::exclusive)
    throw InvalidArgument("a minimum hold (min_hold) is for exclusive locks, not for permits or shared locks");
  request.min_hold = options.min_hold;
  if (options.lock_delay.count() < 0)
    throw InvalidArgument(fmt::format("lock_delay {}ms is negative", options.lock_delay.count()));
  if (options.lock_delay > std::chrono::days(30))
    throw InvalidArgument(fmt::format("lock_delay {} is longer than 30 days", format_duration(options.lock_delay)));
  if (options.lock_delay.count() > 0 && request.kind != HolderKind::exclusive)
    throw InvalidArgument("a lock-delay (lock_delay) is for exclusive locks, not for permits or shared locks");
  request.lock_delay = options.lock_delay;
  if (!options.note.empty()) {
    if (request.kind != HolderKind::exclusive)
      throw InvalidArgument(
          "a holder's note (LockOptions::note) is for exclusive locks, not for permits or shared locks");
    validate_note(options.note);
    request.note = options.note;
  }
  if (request.kind != HolderKind::exclusive && !groups_) throw InvalidArgument(groups_.why_absent());
  return request;
}

void TableCore::write_note(std::string_view name, const std::string& owner, const Grant& grant,
                           const Request& request) {
  if (request.note.empty() || grant.count != 1) return;
  try {
    with_read_retries([&] {  // safe to send twice: it sets the same note on the same grant
      locks_.set_note(name, owner, grant.token, request.note);
      return true;
    });
  } catch (const std::exception& e) {
    logger_->warn("the note of lock '{}' (token {}) was not written: {}", name, grant.token, e.what());
  }
}

std::optional<TableCore::Granted> TableCore::acquire_once(std::string_view name, const std::string& owner,
                                                          const Request& request) {
  if (written_behind_) written_behind_->wait_for(name);
  std::int64_t held_token = 0;  // a re-entry must name the grant it re-enters
  {
    std::lock_guard lock(mutex_);
    auto it = held_.find(Key{owner, std::string(name), request.kind});
    if (it != held_.end()) held_token = it->second->token;
  }
  try {
    int tries = 0;
    auto grant = with_retries([&] {
      if (request.kind == HolderKind::exclusive && acquires_) {
        std::size_t carried = 1;
        auto grant = acquires_->submit(AcquireRequest{name, owner, request.ttl, held_token, request.lock_delay},
                                       tries++ == 0 ? Combine::yes : Combine::alone, carried);
        count_statement_share(carried);
        return grant;
      }
      if (request.kind == HolderKind::exclusive)
        return locks_.try_acquire(name, owner, request.ttl, held_token, request.lock_delay);
      return groups_->try_acquire_member(name, owner, request.kind, request.capacity, request.ttl, held_token);
    });
    if (!grant) return std::nullopt;
    return Granted{*grant, std::nullopt};
  } catch (const OutcomeUnknown& e) {
    // A membership is not read back: one that landed unseen lapses with its lease, counted against
    // the group's capacity until then.
    if (request.kind != HolderKind::exclusive) throw;
    // The upsert is not idempotent, and the abandoned statement may still run after anything we
    // send now: read what happened, and never run it again here. When the read cannot tell, the
    // caller sees the error; at worst a row of ours lapses with its lease, unrenewed.
    logger_->warn("acquire of '{}' lost its reply ({}); reading the row to resolve it", name, e.what());
    if (auto grant = resolve_unknown_acquire(name, owner)) return grant;
    throw;
  }
}

std::optional<TableCore::Granted> TableCore::resolve_unknown_acquire(std::string_view name, const std::string& owner) {
  auto read_sent = local_now();
  auto row = with_read_retries([&] { return locks_.read(name); });
  // A row within its lock-delay has no live lease: it is not a grant (remaining counts the delay).
  // A membership of this owner (a reader or permit holder on another thread) is no exclusive grant.
  if (!row || row->owner != owner || row->remaining <= row->lock_delay || row->kind != HolderKind::exclusive)
    return std::nullopt;
  std::lock_guard lock(mutex_);
  auto it = held_.find(Key{owner, std::string(name), HolderKind::exclusive});
  std::int64_t depth_before = (it != held_.end() && it->second->token == row->token) ? it->second->depth : 0;
  // A row with a release of unknown outcome pending does not show what this acquisition did: its
  // DELETE or decrement may still land, and a count that matches now may be one level short then.
  if (unsettled_releases_.contains({row->name, row->token})) return std::nullopt;
  // A fresh acquisition draws a new token: a row with the token of a guard of ours that was lost
  // (forgotten, not yet released) is that guard's, whose release will delete it.
  if (depth_before == 0 && unreleased_.contains({row->name, row->token})) return std::nullopt;
  // The lease ends no later than the row said when the read was sent: a row this acquisition did
  // not write (our earlier lease, left behind) ends before the request's own TTL would.
  auto lease_left = row->remaining - row->lock_delay;
  if (row->count == depth_before + 1)
    return Granted{Grant{row->count, row->token}, read_sent + lease_left - clock_allowance(lease_left)};
  return std::nullopt;
}

std::optional<Lock> TableCore::attempt(std::string_view name, const std::string& owner, const Request& request,
                                       std::optional<SteadyClock::time_point> waiting_since) {
  std::shared_ptr<HeldLock> held, replaced;
  Grant grant;
  auto sent = SteadyClock::now();
  {
    auto pass = gates_.enter(Key{owner, std::string(name), request.kind});
    sent = SteadyClock::now();
    auto sent_local = local_now();  // the lease's clock (the same but under dblock::testing)
    auto got = acquire_once(name, owner, request);
    if (!got) return std::nullopt;
    grant = got->grant;
    std::tie(held, replaced) = record_grant(name, owner, request, sent_local, *got);
  }
  // Our earlier lease on this name expired and we took it over afresh: the old guards are stale.
  if (replaced) report_lost(*replaced, "it had expired before it was acquired again");
  count_acquired(name, grant.token, grant.count,
                 waiting_since ? count_wait(*waiting_since) : std::chrono::milliseconds(0),
                 std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - sent));
  write_note(name, owner, grant, request);
  return make_guard(std::move(held), grant.count);
}

std::optional<Lock> TableCore::try_acquire(std::string_view name, const LockOptions& options) {
  validate_lock_name(name);
  auto request = request_of(options);
  auto lock = attempt(name, owner_for_this_thread(), request, std::nullopt);
  if (!lock) count_contended(name);
  return lock;
}

// Over 80 lines on purpose, for now: the synchronous API's one waiting loop, kept whole so each
// branch's reason stands beside it; issue 53's single waiting component (with table_queue.cpp's
// loop and the asio API's) is what replaces it.
Lock TableCore::acquire(std::string_view name, std::chrono::milliseconds timeout, const LockOptions& options,
                        const std::stop_token& stop) {
  if (timeout.count() < 0) throw InvalidArgument(fmt::format("timeout {}ms is negative", timeout.count()));
  auto started = SteadyClock::now();
  auto deadline = started + timeout;
  std::string last_connection_error;
  validate_lock_name(name);
  auto request = request_of(options);
  auto owner = owner_for_this_thread();
  bool queued = timeout.count() > 0 && queues(name, owner, request);
  // Another thread of this process waits in the name's queue: a try would only be refused, after
  // waiting in line behind the queue's statements. The first turn takes the name if it is free.
  bool try_first = !queued || !StoreParts::release_hub(*store_).has_waiters(name);
  try {
    if (try_first) {
      if (auto lock = attempt(name, owner, request, std::nullopt)) return std::move(*lock);
      count_contended(name);
    }
  } catch (const ConnectionError& e) {
    if (timeout.count() == 0) throw;
    last_connection_error = e.what();  // a waiter rides out an outage until its deadline
  } catch (const TransientError& e) {
    if (timeout.count() == 0) throw;
    last_connection_error = e.what();  // and conflicts that outlasted their retries (a cluster's hot name)
  }
  WaitReport wait_report(*this, name, started);
  if (queued) {
    wait_report.begin();
    auto lock = wait_in_queue(name, owner, request, started, deadline, try_first, stop, last_connection_error);
    wait_report.settle();
    if (lock) return std::move(*lock);
    throw_timeout(name, timeout, started, last_connection_error, stop.stop_requested());
  }
  // A writer marked as waiting takes its mark back however the wait ends.
  bool marked = false;
  ScopeExit unmark_on_exit([&]() noexcept {
    if (!marked) return;
    try {
      groups_->unmark_writer(name, owner);
    } catch (const std::exception& e) {
      logger_->warn("taking back the waiting-writer mark on '{}' failed (it lapses by itself): {}", name, e.what());
    }
  });
  if (timeout.count() > 0) {
    wait_report.begin();
    auto& hub = StoreParts::release_hub(*store_);
    auto subscription = hub.subscribe(std::string(name), std::min(timeout, StoreParts::connect_timeout(*store_)));
    bool notified = hub.notifying();
    Backoff backoff(options_.backoff_initial, options_.backoff_factor, options_.backoff_max,
                    this_thread_owner_nonce() ^ static_cast<std::uint64_t>(started.time_since_epoch().count()));
    // Try once right after subscribing: a release before the watch was in place sent no wake-up.
    bool try_now = true;
    bool woken = false;  // by a release: groups hand the wake-up on (ReleaseHub::Subscription::pass_on)
    while (SteadyClock::now() < deadline && !stop.stop_requested()) {
      try {
        if (try_now) {
          if (auto lock = attempt(name, owner, request, started)) {
            wait_report.settle();
            if (woken && request.kind != HolderKind::exclusive) subscription->pass_on();  // others may join too
            return std::move(*lock);
          }
          count_contended(name);
          if (woken && (request.kind != HolderKind::exclusive || marked)) subscription->pass_on();
        }
        // Waiting reads the holder's lease and sleeps until it ends or a release wakes us; it writes
        // nothing but a writer's mark while readers hold the name.
        auto left = with_read_retries([&] { return lease_left_for_waiter(name, owner, request, marked); });
        auto now = SteadyClock::now();
        auto poll = notified ? kNotifiedSafetyPoll : backoff.next();
        auto wake_at = std::min(deadline, now + poll);
        if (left && left->count() > 0) {
          wake_at = std::min(wake_at, now + *left + std::chrono::milliseconds(1));
        } else if (!try_now) {
          try_now = true;  // free now: try at once
          continue;
        } else {
          // Free by its lease, yet the attempt answered busy: a transaction holds the row (a
          // fence past the lease, whose end wakes nobody; an attempt waits for it a bounded while
          // inside its statement, which paces these tries) or a takeover was in flight. Soon
          // again, not after a grown backoff: this waiter is the row's next owner.
          wake_at = std::min(deadline, now + options_.backoff_initial);
        }
        bool released = subscription->wait_until(wake_at, stop);
        woken = released;
        try_now = released || (left && SteadyClock::now() >= now + *left);
      } catch (const Error& e) {
        // The database is unreachable: keep waiting (the pool reconnects) and try again later.
        // An acquisition whose outcome stayed unknown is not held by us: its lease simply lapses.
        // The same for conflicts that outlasted their retries (certification on a cluster's hot
        // name): nothing was granted, and the next try comes after a backoff.
        if (!waiter_rides_out(e)) throw;
        last_connection_error = e.what();
        logger_->warn("waiting for lock '{}': {}", name, e.what());
        woken = subscription->wait_until(std::min(deadline, SteadyClock::now() + backoff.next()), stop);
        try_now = true;
      }
    }
    // Woken at its deadline: a release this waiter has no time left to use goes to the next one (at
    // worst a wake-up it did use, and another waiter looks once more for nothing).
    if (woken) subscription->pass_on();
  }
  wait_report.settle();
  throw_timeout(name, timeout, started, last_connection_error, stop.stop_requested());
}

std::optional<std::chrono::milliseconds> TableCore::lease_left_for_waiter(std::string_view name,
                                                                          const std::string& owner,
                                                                          const Request& request, bool& marked) {
  if (request.kind != HolderKind::exclusive) return groups_->first_lease_end(name);
  if (!groups_) return locks_.lease_left(name);
  // Longer than the longest pause between two tries, so the mark holds while the writer waits.
  auto mark_for = 3 * std::max<std::chrono::milliseconds>(kNotifiedSafetyPoll, options_.backoff_max);
  bool now_marked = false;
  auto left = groups_->lease_left_marking_writer(name, owner, mark_for, now_marked);
  marked = marked || now_marked;
  return left;
}

void TableCore::give_back(std::string_view name, const std::string& owner, HolderKind kind, std::int64_t token) {
  try {
    if (kind == HolderKind::exclusive)
      locks_.release(name, owner, token);
    else
      groups_->release_member(name, owner, kind, token);
  } catch (const OutcomeUnknown& e) {
    // Its decrement or DELETE may still land: a lost-reply acquisition must not take the row,
    // whose count matches only until then.
    if (kind == HolderKind::exclusive) remember_unsettled(name, token);
    logger_->warn("giving back a grant of '{}' not handed out lost its reply (its lease lapses): {}", name, e.what());
  } catch (const std::exception& e) {
    logger_->warn("giving back a grant of '{}' not handed out failed (its lease lapses): {}", name, e.what());
  }
}

}  // namespace dblock::detail
