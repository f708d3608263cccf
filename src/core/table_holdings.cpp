// What a TableCore holds: grants recorded and forgotten, releases left unsettled, locks marked
// lost, and the watchdog that renews them all in one statement per cycle.
#include "core/table_core.hpp"

#include <algorithm>
#include <exception>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/duration.hpp"

namespace dblock::detail {

namespace {

constexpr std::size_t kUnsettledReleasesKept = 256;

}  // namespace

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
    for (auto index : part.asked)
      if (index < at.size()) all.asked.push_back(at[index]);
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
  for (auto index : renewal.asked)
    if (index < outcome.size() && outcome[index] == Outcome::renewed) report_release_requested(*snapshot[index]);
  if (!renewal.busy.empty())
    logger_->debug("{} lock(s) left for the next renewal: a transaction (a fence) holds their rows",
                   renewal.busy.size());
  return renewal.busy.empty();
}

}  // namespace dblock::detail
