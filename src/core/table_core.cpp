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
constexpr std::size_t kUnsettledReleasesKept = 256;
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

void TableCore::write_released(const std::vector<std::shared_ptr<HeldLock>>& batch) {
  std::vector<bool> deleted(batch.size(), true);
  try {
    if (batch.size() == 1) {
      deleted[0] = locks_.release_last(batch[0]->name, batch[0]->owner, batch[0]->token).has_value();
    } else {
      std::vector<ReleaseRequest> requests;
      requests.reserve(batch.size());
      for (const auto& held : batch) requests.push_back(ReleaseRequest{held->name, held->owner, held->token});
      deleted = locks_.release_last_many(requests);
    }
    for (std::size_t i = 0; i < batch.size(); ++i) count_statement_share(batch.size());
  } catch (const OutcomeUnknown& e) {
    // The batch may still land after anything sent now: never sent again. Each row is read, as a
    // single release's lost reply is; a row still ours is remembered as unsettled, and one whose
    // read fails too is remembered all the same (its DELETE may land under a later grant's reply).
    logger_->warn("{} release(s) written behind lost their reply ({}); reading the rows to resolve them", batch.size(),
                  e.what());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      try {
        deleted[i] = resolve_unknown_release(*batch[i], 1).has_value();
      } catch (const std::exception& again) {
        remember_unsettled(*batch[i]);
        logger_->warn("the release of '{}' written behind stays unresolved (its row lapses with its lease): {}",
                      batch[i]->name, again.what());
      }
    }
  } catch (const std::exception& e) {
    // Nothing of it landed (a transient error, no session): each again, alone, by a release's rules.
    logger_->warn("{} release(s) written behind failed ({}); releasing each again", batch.size(), e.what());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      try {
        deleted[i] = release_once(*batch[i], 1, std::chrono::milliseconds(0), Combine::alone).has_value();
      } catch (const std::exception& again) {
        logger_->warn("the release of '{}' written behind failed (its row lapses with its lease): {}", batch[i]->name,
                      again.what());
      }
    }
  }
  for (std::size_t i = 0; i < batch.size(); ++i)
    if (!deleted[i]) settle_not_ours(batch[i], true);
}

bool TableCore::settle_not_ours(const std::shared_ptr<HeldLock>& held, bool written_behind) {
  // The holder's last release is its acknowledgement of a revocation: it no longer believes it
  // holds the lock, so the name need not wait for the revoked lease to end.
  bool acknowledged = acknowledge_revocation(*held);
  // Its caller was told how the grant ended when the release was queued (release()): a loss found
  // now would be a second end of it, so it only goes to the log.
  if (written_behind)
    logger_->warn(
        "the release of lock '{}' (token {}), written behind once its caller had been told how the grant "
        "ended, found it {}",
        held->name, held->token.load(),
        acknowledged ? "revoked (the name is free now)" : "gone: its lease had ended or it was taken over");
  return acknowledged;
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
  if (request.kind != HolderKind::exclusive && !groups_) throw InvalidArgument(groups_.why_absent());
  return request;
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
  return make_guard(std::move(held), grant.count);
}

std::optional<Lock> TableCore::try_acquire(std::string_view name, const LockOptions& options) {
  validate_lock_name(name);
  auto request = request_of(options);
  auto lock = attempt(name, owner_for_this_thread(), request, std::nullopt);
  if (!lock) count_contended(name);
  return lock;
}

Lock TableCore::acquire(std::string_view name, std::chrono::milliseconds timeout, const LockOptions& options) {
  if (timeout.count() < 0) throw InvalidArgument(fmt::format("timeout {}ms is negative", timeout.count()));
  auto started = SteadyClock::now();
  auto deadline = started + timeout;
  std::string last_connection_error;
  try {
    if (auto lock = try_acquire(name, options)) return std::move(*lock);
  } catch (const ConnectionError& e) {
    if (timeout.count() == 0) throw;
    last_connection_error = e.what();  // a waiter rides out an outage until its deadline
  } catch (const TransientError& e) {
    if (timeout.count() == 0) throw;
    last_connection_error = e.what();  // and conflicts that outlasted their retries (a cluster's hot name)
  }
  auto request = request_of(options);
  auto owner = owner_for_this_thread();
  WaitReport wait_report(*this, name, started);
  if (timeout.count() > 0 && queues(request)) {
    wait_report.begin();
    auto lock = wait_in_queue(name, owner, request, started, deadline, last_connection_error);
    wait_report.settle();
    if (lock) return std::move(*lock);
    throw_timeout(name, timeout, started, last_connection_error);
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
    while (SteadyClock::now() < deadline) {
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
        bool released = subscription->wait_until(wake_at);
        woken = released;
        try_now = released || (left && SteadyClock::now() >= now + *left);
      } catch (const Error& e) {
        // The database is unreachable: keep waiting (the pool reconnects) and try again later.
        // An acquisition whose outcome stayed unknown is not held by us: its lease simply lapses.
        // The same for conflicts that outlasted their retries (certification on a cluster's hot
        // name): nothing was granted, and the next try comes after a backoff.
        bool rides_out =
            dynamic_cast<const ConnectionError*>(&e) != nullptr || dynamic_cast<const TransientError*>(&e) != nullptr;
        if (!rides_out) throw;
        last_connection_error = e.what();
        logger_->warn("waiting for lock '{}': {}", name, e.what());
        woken = subscription->wait_until(std::min(deadline, SteadyClock::now() + backoff.next()));
        try_now = true;
      }
    }
    // Woken at its deadline: a release this waiter has no time left to use goes to the next one (at
    // worst a wake-up it did use, and another waiter looks once more for nothing).
    if (woken) subscription->pass_on();
  }
  wait_report.settle();
  throw_timeout(name, timeout, started, last_connection_error);
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

std::pair<std::shared_ptr<HeldLock>, std::shared_ptr<HeldLock>> TableCore::record_grant(std::string_view name,
                                                                                        const std::string& owner,
                                                                                        const Request& request,
                                                                                        SteadyClock::time_point sent,
                                                                                        const Granted& granted) {
  auto ttl = request.ttl;
  auto grant = granted.grant;
  auto deadline = lease_deadline(sent, ttl);
  if (granted.lease_ends_by) deadline = std::min(deadline, *granted.lease_ends_by);
  auto now = local_now();
  if (now >= deadline) {
    // The reply came so late that the lease it granted may already have run out (and been
    // granted again): never hand it to the caller. Give the row back if it is still ours.
    // A fresh grant over our own row (or membership) took it over under a new token, and the
    // give-back deletes it: the guards of our earlier grant must stop believing before it can land.
    if (grant.count <= 1) {
      std::shared_ptr<HeldLock> stale;
      {
        std::lock_guard lock(mutex_);
        auto it = held_.find(Key{owner, std::string(name), request.kind});
        if (it != held_.end() && it->second->token != grant.token) {
          stale = std::move(it->second);
          held_.erase(it);
        }
      }
      if (stale) {
        stale->end_belief(now);
        report_lost_later(stale, "a later acquisition of this owner took its row over, and its reply came too late");
      }
    }
    give_back(name, owner, request.kind, grant.token);
    throw ConnectionError(
        fmt::format("lock '{}' was granted, but the reply took longer than its TTL {}", name, format_duration(ttl)));
  }
  std::shared_ptr<HeldLock> held;
  std::shared_ptr<HeldLock> replaced;
  bool lost_reentry = false;
  {
    std::lock_guard lock(mutex_);
    auto& slot = held_[Key{owner, std::string(name), request.kind}];
    // A re-entry: the database kept the later of the two expiries, so does the record.
    if (slot && slot->token == grant.token && slot->extend(deadline, now)) {
      slot->raise_ttl(ttl);
    } else if (grant.count > 1) {
      // A re-entry of a grant whose record was lost meanwhile (its deadline passed): a second
      // record of the token would not stop the lost guard's last release from deleting the row.
      lost_reentry = true;
    } else {
      replaced = std::exchange(
          slot, std::make_shared<HeldLock>(std::string(name), owner, grant.token, ttl, deadline, request.kind));
      unreleased_.emplace(std::string(name), grant.token);
    }
    if (!lost_reentry) {
      slot->depth += 1;
      slot->min_hold = std::max(slot->min_hold, request.min_hold);
      held = slot;
    } else if (!slot) {
      held_.erase(Key{owner, std::string(name), request.kind});
    }
  }
  if (lost_reentry) {
    give_back(name, owner, request.kind, grant.token);
    throw ConnectionError(
        fmt::format("lock '{}' was re-entered, but the grant it re-entered was lost meanwhile; "
                    "try again",
                    name));
  }
  // A TTL is at least three check intervals, so only a deadline capped by the lease left on an
  // adopted row can come before the timer's next round.
  if (granted.lease_ends_by && deadline < now + check_interval_) watch_deadline(deadline);
  return {std::move(held), std::move(replaced)};
}

void TableCore::forget(const std::shared_ptr<HeldLock>& held) {
  auto it = held_.find(Key{held->owner, held->name, held->kind});
  if (it != held_.end() && it->second == held) held_.erase(it);
}

std::optional<std::int64_t> TableCore::release_once(const HeldLock& held, std::int64_t depth_before,
                                                    std::chrono::milliseconds min_hold, Combine first_try) {
  try {
    int tries = 0;
    return with_release_retries([&] {
      if (held.kind != HolderKind::exclusive)
        return groups_->release_member(held.name, held.owner, held.kind, held.token);
      // Within its minimum hold the row stays, held by nobody, until grant + min_hold; one extra
      // statement only for locks that ask for a minimum hold and outlive it.
      if (depth_before <= 1 && min_hold.count() > 0 &&
          locks_.release_keeping(held.name, held.owner, held.token, min_hold))
        return std::optional<std::int64_t>(0);
      if (depth_before <= 1 && queue_ != nullptr) return queue_->release_handing_off(held.name, held.owner, held.token);
      if (depth_before <= 1 && releases_) {
        std::size_t carried = 1;
        bool deleted = releases_->submit(ReleaseRequest{held.name, held.owner, held.token},
                                         tries++ == 0 ? first_try : Combine::alone, carried);
        count_statement_share(carried);
        return deleted ? std::optional<std::int64_t>(0) : std::nullopt;
      }
      if (depth_before <= 1) return locks_.release_last(held.name, held.owner, held.token);
      return locks_.release(held.name, held.owner, held.token);
    });
  } catch (const OutcomeUnknown& e) {
    // A membership is done locally; one that did not land lapses with its lease, unrenewed.
    if (held.kind != HolderKind::exclusive) return std::max<std::int64_t>(depth_before - 1, 0);
    // Never release again: the abandoned statement may still run, and two decrements would
    // delete the row under an outer guard. If it never runs, the row keeps one level more than
    // we hold and lapses with its lease once we stop renewing it.
    logger_->warn("release of '{}' lost its reply ({}); reading the row to resolve it", held.name, e.what());
    try {
      return resolve_unknown_release(held, depth_before);
    } catch (...) {
      remember_unsettled(held);  // unread: its statement may still land all the same
      throw;
    }
  }
}

std::optional<std::int64_t> TableCore::resolve_unknown_release(const HeldLock& held, std::int64_t depth_before) {
  auto row = with_read_retries([&] { return locks_.read(held.name); });
  // Revoked from this grant: the release cannot have deleted it and never will (the owner is
  // marked), so it is settled as a release that found it revoked: acknowledged, reported lost.
  if (row && revoked_from(*row, held.owner, held.token)) return std::nullopt;
  bool still_ours = row && row->owner == held.owner && row->token == held.token;
  if (still_ours) remember_unsettled(held);
  if (still_ours) return std::min(row->count, depth_before - 1);
  return depth_before <= 1 ? std::optional<std::int64_t>(0) : std::nullopt;
}

void TableCore::remember_unsettled(const HeldLock& held) { remember_unsettled(held.name, held.token); }

void TableCore::remember_unsettled(std::string_view name, std::int64_t token) {
  std::lock_guard lock(mutex_);
  if (!unsettled_releases_.emplace(std::string(name), token).second) return;
  unsettled_order_.emplace_back(std::string(name), token);
  if (unsettled_order_.size() > kUnsettledReleasesKept) {
    unsettled_releases_.erase(unsettled_order_.front());
    unsettled_order_.pop_front();
  }
}

bool TableCore::acknowledge_revocation(const HeldLock& held) {
  try {
    return with_release_retries([&] { return locks_.acknowledge_revoked(held.name, held.owner, held.token); });
  } catch (const std::exception& e) {
    // The revoked row then lapses with its lease: later, never unsafely.
    logger_->warn("letting go of the revoked lock '{}' failed (it lapses with its lease): {}", held.name, e.what());
    return false;
  }
}

void TableCore::release(const std::shared_ptr<HeldLock>& held) {
  std::optional<std::int64_t> remaining;
  bool acknowledged = false;
  bool written_behind = false;
  bool released_behind = false;  // written behind, and this release ends the grant as released
  std::exception_ptr failed;     // the statement's error, for the caller once the end is reported
  std::int64_t depth_before = 0;
  auto sent = SteadyClock::now();
  {
    auto pass = gates_.enter(Key{held->owner, held->name, held->kind});
    std::chrono::milliseconds min_hold{0};
    {
      // Forget first: whatever the database says, this guard no longer holds the lock, and a row
      // we fail to release must not be renewed forever.
      std::lock_guard lock(mutex_);
      depth_before = held->depth;
      min_hold = held->min_hold;
      if (--held->depth <= 0) {
        forget(held);
        if (auto it = unreleased_.find({held->name, held->token}); it != unreleased_.end()) unreleased_.erase(it);
      }
    }
    sent = SteadyClock::now();
    bool last_plain = held->kind == HolderKind::exclusive && depth_before <= 1;
    // Queued while the pass is held: a re-entry of this owner waits for it (acquire_once).
    // What the manager knows is all a release written behind can report, and it claims the grant's
    // end before the writer can send it: what its statement finds later is no second end.
    if (written_behind_ && last_plain && min_hold.count() == 0)
      written_behind = written_behind_->admit(
          held, [&]() noexcept { released_behind = held->believed_held(local_now()) && held->claim_end(); });
    if (!written_behind) {
      ScopeExit sent_own([&]() noexcept {
        if (written_behind_ && last_plain && min_hold.count() == 0) written_behind_->sent();
      });
      try {
        remaining = release_once(*held, depth_before, min_hold);
        // An inner level's release is no acknowledgement: an outer guard may still believe it
        // until its next renewal.
        if (!remaining && last_plain) acknowledged = settle_not_ours(held, false);
      } catch (...) {
        failed = std::current_exception();
      }
    }
  }
  if (written_behind) {
    count_written_behind();
    if (!released_behind)
      throw_lost_on_release(*held,
                            "it had been reported lost or its local deadline had passed (the release was "
                            "written behind)");
    emit_released(*held, 0, sent);
    return;
  }
  if (failed) {
    report_failed_release(*held, std::max<std::int64_t>(depth_before - 1, 0), sent);
    std::rethrow_exception(failed);
  }
  if (acknowledged) throw_lost_on_release(*held, "it was revoked (dblock release --force); the name is free now");
  if (!remaining) throw_lost_on_release(*held, "its lease ended or another owner took it over");
  // The row was still ours and is released now, but the holder was already told it lost it.
  if (held->lost.load()) throw_lost_on_release(*held, "it had been reported lost (its local deadline passed)");
  // The levels this manager's guards still hold, as in advisory mode: a membership's row may count
  // more (a level whose reply was lost lapses with its lease), but the grant ends with its last guard.
  report_released(*held, std::max<std::int64_t>(depth_before - 1, 0), sent);
}

void TableCore::mark_lost(const std::shared_ptr<HeldLock>& held, std::string_view why) {
  {
    std::lock_guard lock(mutex_);
    forget(held);
  }
  report_lost(*held, why);
}

std::vector<std::shared_ptr<HeldLock>> TableCore::held_snapshot() {
  std::vector<std::shared_ptr<HeldLock>> snapshot;
  std::lock_guard lock(mutex_);
  snapshot.reserve(held_.size());
  for (auto& [key, held] : held_) snapshot.push_back(held);
  return snapshot;
}

void TableCore::deadline_passed(const std::shared_ptr<HeldLock>& held) {
  mark_lost(held, "its local deadline passed before a renewal succeeded");
}

Renewal TableCore::renew_all(const std::vector<HeldRef>& refs, SteadyClock::time_point reply_by) {
  std::vector<HeldRef> plain, members;
  std::vector<std::size_t> plain_at, members_at;  // positions in refs
  for (std::size_t i = 0; i < refs.size(); ++i) {
    bool member = refs[i].kind != HolderKind::exclusive;
    (member ? members : plain).push_back(refs[i]);
    (member ? members_at : plain_at).push_back(i);
  }
  Renewal all;
  auto gather = [&all](const Renewal& part, const std::vector<std::size_t>& at) {
    for (auto index : part.renewed)
      if (index < at.size()) all.renewed.push_back(at[index]);
    for (auto index : part.busy)
      if (index < at.size()) all.busy.push_back(at[index]);
  };
  if (!plain.empty()) gather(with_read_retries([&] { return locks_.renew(plain, reply_by); }), plain_at);
  if (!members.empty())
    gather(with_read_retries([&] { return groups_->renew_members(members, reply_by); }), members_at);
  return all;
}

bool TableCore::watchdog_cycle() {
  auto now = local_now();
  auto snapshot = held_snapshot();
  std::erase_if(snapshot, [&](const auto& held) { return !held->believed_held(now); });
  if (snapshot.empty()) return true;
  // Rows are renewed in name order, the order combined statements lock them in: held_ is keyed
  // by owner first, and two statements locking rows in different orders could deadlock.
  std::ranges::sort(snapshot, {}, [](const auto& held) { return std::tie(held->name, held->owner); });
  std::vector<HeldRef> refs;
  refs.reserve(snapshot.size());
  auto reply_by = SteadyClock::time_point::max();
  for (auto& held : snapshot) {
    refs.push_back(HeldRef{held->name, held->owner, held->token, held->ttl.load(), held->kind});
    reply_by = std::min(reply_by, held->deadline());
  }
  // A renewal that cannot answer before the first deadline is useless: the timer reports that
  // lock lost, and the next round renews the others on a fresh session.
  auto sent = SteadyClock::now();
  auto sent_local = local_now();  // the lease's clock (the same but under dblock::testing)
  Renewal renewal;
  try {
    renewal = renew_all(refs, reply_by);
  } catch (const std::exception& e) {
    logger_->warn("renewing {} lock(s) failed, will retry: {}", snapshot.size(), e.what());
    LockEvent failed{LockEventKind::renew_failed, {}, 0, static_cast<std::int64_t>(snapshot.size())};
    failed.latency = std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - sent);
    emit(failed);
    return false;
  }
  count_renewal(static_cast<std::int64_t>(renewal.renewed.size()),
                std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - sent));
  enum class Outcome { gone, renewed, busy };
  std::vector<Outcome> outcome(snapshot.size(), Outcome::gone);
  for (auto index : renewal.renewed)
    if (index < outcome.size()) outcome[index] = Outcome::renewed;
  for (auto index : renewal.busy)
    if (index < outcome.size()) outcome[index] = Outcome::busy;
  now = local_now();
  for (std::size_t i = 0; i < snapshot.size(); ++i) {
    auto& held = snapshot[i];
    if (outcome[i] == Outcome::renewed) held->extend(lease_deadline(sent_local, refs[i].ttl), now);
    // A fenced transaction holds the row (the holder's own, or one given its token): its deadline
    // stays, and the next round, soon, renews it once the transaction ends.
    if (outcome[i] != Outcome::gone) continue;
    bool still_held;
    {
      std::lock_guard lock(mutex_);
      auto it = held_.find(Key{held->owner, held->name, held->kind});
      still_held = it != held_.end() && it->second == held;
    }
    if (still_held) mark_lost(held, "the row was deleted, expired or taken over");
  }
  if (!renewal.busy.empty())
    logger_->debug("{} lock(s) left for the next renewal: a transaction (a fence) holds their rows",
                   renewal.busy.size());
  return renewal.busy.empty();
}

}  // namespace dblock::detail
