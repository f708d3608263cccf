// Table mode's fair queue (ManagerOptions::fair_queue, doc/fair-queue.md): a waiter records itself as
// a row after its first try fails and is granted the name, in arrival order, by the release of the
// holder before it, in that release's own commit. The waiter learns of its grant by one read when a
// release wakes it (or its poll comes), and writes only to queue, to renew its waiter lease (every
// third of it), to take a name a holder left without releasing it, and to leave.
#include <algorithm>
#include <exception>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <dblock/errors.hpp>

#include "base/scope_exit.hpp"
#include "base/terminal_text.hpp"
#include "core/backoff.hpp"
#include "core/owner_id.hpp"
#include "core/release_hub.hpp"
#include "core/retry.hpp"
#include "core/store_parts.hpp"
#include "core/table_core.hpp"
#include "core/wait_cycle.hpp"

namespace dblock::detail {

namespace {

constexpr std::chrono::milliseconds kQueuedSafetyPoll{1000};
/// A grant a release reported is taken without a read within TTL / this of the turn that bounds it.
constexpr int kHandedGrantFreshness = 8;
/// The wait graph read for a deadlock: more live waiters than this on names with live holders and the
/// cycle may be missed (it is then waited out, as without the check).
constexpr std::size_t kWaitEdgesRead = 10000;

}  // namespace

bool TableCore::queues(std::string_view name, const std::string& owner, const Request& request) {
  // One owner per waiting thread: threads sharing an owner (OwnerScope::manager) would share one
  // waiter row, and two of them could each take the one grant it receives.
  if (queue_ == nullptr || options_.owner_scope != OwnerScope::thread || request.kind != HolderKind::exclusive ||
      request.lock_delay.count() != 0 || request.min_hold.count() != 0)
    return false;
  // A re-entry that waits (its row is busy under a fenced transaction) waits for its own row: a
  // waiter's look reads a live row of its owner as its grant, and would count that one grant twice.
  std::lock_guard lock(mutex_);
  return !held_.contains(Key{owner, std::string(name), request.kind});
}

bool TableCore::granted_to_waiter(std::string_view name, const std::optional<Grant>& grant) {
  if (!grant || grant->count != 1) return false;  // a waiter's grant is one level
  std::pair<std::string, std::int64_t> row{std::string(name), grant->token};
  std::lock_guard lock(mutex_);
  return !unreleased_.contains(row) && !unsettled_releases_.contains(row);
}

template <class Find>
std::optional<Lock> TableCore::take_if_granted(std::string_view name, const std::string& owner, const Request& request,
                                               SteadyClock::time_point started, Find&& find) {
  std::shared_ptr<HeldLock> held, replaced;
  Grant grant;
  {
    // A release of this owner's earlier grant of the name holds the pass until its statement has
    // answered: a waiter's read after it no longer shows that grant as the owner's live row.
    auto pass = gates_.enter(Key{owner, std::string(name), request.kind});
    std::optional<QueuedFind> found = find();
    if (!found) return std::nullopt;
    grant = found->granted.grant;
    std::tie(held, replaced) = record_grant(name, owner, request, found->sent, found->granted);
  }
  if (replaced) report_lost(*replaced, "it had expired before it was acquired again");
  count_acquired(name, grant.token, grant.count, count_wait(started));
  write_note(name, owner, grant, request);
  return make_guard(std::move(held), grant.count);
}

TableCore::Granted TableCore::queued_grant(Grant grant, SteadyClock::time_point sent, std::chrono::milliseconds left) {
  // The lease began when the statement that granted it ran, which may be long before the read that
  // found it: it ends no later than what that read said was left, from when the read was sent.
  return Granted{grant, sent + left - clock_allowance(left)};
}

std::optional<Lock> TableCore::take_handed_grant(std::string_view name, const std::string& owner,
                                                 const Request& request, SteadyClock::time_point started,
                                                 const std::optional<HandedGrant>& handed, std::int64_t seq,
                                                 std::optional<SteadyClock::time_point> queued_by_turn) {
  // Only soon after the turn that bounds its lease: later the bound would cut the lease short by
  // more than a read costs, and the waiter reads its grant instead.
  if (!handed || handed->seq != seq || seq <= 0 || !queued_by_turn ||
      local_now() - *queued_by_turn > request.ttl / kHandedGrantFreshness)
    return std::nullopt;
  auto lock = take_if_granted(name, owner, request, started, [&]() -> std::optional<QueuedFind> {
    Grant grant{1, handed->token};
    if (!granted_to_waiter(name, grant)) return std::nullopt;
    return QueuedFind{*queued_by_turn, queued_grant(grant, *queued_by_turn, request.ttl)};
  });
  if (lock) count_grant_unread();
  return lock;
}

void TableCore::report_queued(std::string_view name, std::int64_t seq) noexcept {
  if (!options_.on_queued) return;
  try {
    auto position = with_read_retries([&] { return queue_->place(name, seq); });
    if (position > 0) options_.on_queued(name, position);
  } catch (const std::exception& e) {
    logger_->warn("telling a waiter of '{}' its place in the queue failed: {}", name, e.what());
  } catch (...) {
    logger_->error("on_queued callback for '{}' threw", name);
  }
}

void TableCore::throw_if_deadlocked(std::string_view name, const std::string& owner) {
  {
    // An owner that holds nothing here holds no row of the lock table (owners are per manager and
    // thread), so no cycle runs through it: nothing to read.
    std::lock_guard lock(mutex_);
    auto held = held_.lower_bound(Key{owner, std::string(), HolderKind{}});
    if (held == held_.end() || std::get<0>(held->first) != owner) return;
  }
  std::vector<WaitEdge> cycle;
  try {
    cycle = find_wait_cycle(with_read_retries([&] { return queue_->wait_edges(kWaitEdgesRead); }), owner, name);
  } catch (const Error& e) {
    logger_->warn("reading the wait graph for '{}' failed (read again at the waiter's next renewal): {}", name,
                  e.what());
    return;
  }
  // The other waiters of the cycle read the same rows and leave it to this one, or this one to them.
  if (cycle.empty() || deadlock_victim(cycle).waiter != owner) return;
  auto description = describe_wait_cycle(cycle);
  logger_->warn("a deadlock: {} (the waiter for '{}' gives up)", description, name);
  throw Deadlock(
      fmt::format("lock '{}' would never be granted: a deadlock: {}. This waiter, the last of the cycle "
                  "to queue, gave up; the locks its owner holds are still held",
                  terminal_safe(name), description));
}

void TableCore::leave_queue(std::string_view name, const std::string& owner, std::int64_t seq) noexcept {
  try {
    auto pass = gates_.enter(Key{owner, std::string(name), HolderKind::exclusive});
    if (with_read_retries([&] { return queue_->leave(name, owner, seq); })) return;
    // Granted as it left: nobody will hold that grant, so it goes to the next waiter at once.
    auto look = with_read_retries([&] { return queue_->look(name, owner, seq); });
    if (granted_to_waiter(name, look.grant))
      with_release_retries([&] { return queue_->release_handing_off(name, owner, look.grant->token, {}); });
  } catch (const std::exception& e) {
    logger_->warn(
        "leaving the queue of '{}' failed (its waiter row lapses with its waiter lease, a grant handed to it "
        "with its lease): {}",
        name, e.what());
  }
}

std::optional<Lock> TableCore::wait_in_queue(std::string_view name, const std::string& owner, const Request& request,
                                             SteadyClock::time_point started, SteadyClock::time_point deadline,
                                             bool tried, const std::stop_token& stop, std::string& last_error) {
  auto& hub = StoreParts::release_hub(*store_);
  auto ready_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  auto subscription =
      hub.subscribe(std::string(name), std::min(ready_timeout, StoreParts::connect_timeout(*store_)), owner);
  bool notified = hub.notifying();
  Backoff backoff(options_.backoff_initial, options_.backoff_factor, options_.backoff_max,
                  this_thread_owner_nonce() ^ static_cast<std::uint64_t>(started.time_since_epoch().count()));
  auto waiter_ttl = request.ttl;
  std::int64_t seq = 0;
  // However the wait ends but by a grant or a leave already done, the row goes (and a grant it met).
  ScopeExit leave_on_exit([&]() noexcept {
    if (seq > 0) leave_queue(name, owner, seq);
  });
  auto holder_left = std::chrono::milliseconds(0);
  auto renew_at = SteadyClock::now();
  // When the last turn that found this waiter queued was sent: a grant made to its row since came
  // later (a turn holds the name's transaction lock, as a grant does), so its lease ends no sooner
  // than this + its TTL. A look takes no such lock and bounds nothing: a grant in flight may have
  // read the clock before the look's snapshot.
  std::optional<SteadyClock::time_point> queued_by_turn;
  bool take = true;  // a turn is due: to queue, to renew the waiter lease, or to take a free name
  while (SteadyClock::now() < deadline && !stop.stop_requested()) {
    try {
      if (take) {
        Turn turn;
        auto lock = take_if_granted(name, owner, request, started, [&]() -> std::optional<QueuedFind> {
          auto sent = local_now();
          try {
            turn = with_retries([&] { return queue_->take_turn(name, owner, request.ttl, waiter_ttl, seq); });
          } catch (const OutcomeUnknown&) {
            // It may have queued (the next turn of this owner moves that row), renewed, or taken the name.
            if (auto got = resolve_unknown_acquire(name, owner)) return QueuedFind{sent, *got};
            throw;
          }
          if (!granted_to_waiter(name, turn.grant)) {
            queued_by_turn = sent;
            return std::nullopt;
          }
          return QueuedFind{sent, queued_grant(*turn.grant, sent, turn.left)};
        });
        if (lock) {
          seq = 0;  // its row went with the grant
          return lock;
        }
        // seq 0: its row was gone (reaped) and nothing was granted: queued again next.
        auto queued_before = std::exchange(seq, turn.seq);
        if (seq > 0 && !std::exchange(tried, true)) count_contended(name);
        if (seq > 0 && seq != queued_before) report_queued(name, seq);
        // At queueing and at every renewal: a cycle whose last edge committed after this waiter's
        // read is found at the next one (doc/fair-queue.md, "Deadlocks").
        if (seq > 0) throw_if_deadlocked(name, owner);
        take = seq == 0;
        holder_left = turn.left;
        renew_at = SteadyClock::now() + waiter_ttl / 3;
        if (take) continue;
      }
      auto now = SteadyClock::now();
      auto wake_at = std::min({deadline, renew_at, now + (notified ? kQueuedSafetyPoll : backoff.next())});
      if (holder_left.count() > 0) wake_at = std::min(wake_at, now + holder_left + std::chrono::milliseconds(1));
      bool woken = subscription->wait_until(wake_at, stop);
      // A grant heard is taken before anything else (at the deadline too, as the leave there would).
      auto handed = subscription->take_grant();
      if (handed && !stop.stop_requested()) {
        if (auto lock = take_handed_grant(name, owner, request, started, handed, seq, queued_by_turn)) {
          seq = 0;
          return lock;
        }
      }
      if (SteadyClock::now() >= deadline || stop.stop_requested()) break;
      if (SteadyClock::now() >= renew_at) {
        take = true;
        continue;
      }
      WaiterLook look;
      auto lock = take_if_granted(name, owner, request, started, [&]() -> std::optional<QueuedFind> {
        auto sent = local_now();
        look = with_read_retries([&] { return queue_->look(name, owner, seq); });
        if (!granted_to_waiter(name, look.grant)) return std::nullopt;
        return QueuedFind{sent, queued_grant(*look.grant, sent, look.grant_left)};
      });
      if (lock) {
        seq = 0;
        return lock;
      }
      // A release of this process wakes its oldest waiter, which may not be the one it granted.
      if (woken) subscription->pass_on_later();
      if (!look.queued) seq = 0;
      holder_left = look.holder_left;
      // Gone (reaped), or the name is free (a holder left it without a release): a turn, now.
      take = !look.queued || holder_left.count() <= 0;
    } catch (const Error& e) {
      if (!waiter_rides_out(e)) throw;
      last_error = e.what();
      logger_->warn("waiting in the queue of lock '{}': {}", name, e.what());
      subscription->wait_until(std::min(deadline, SteadyClock::now() + backoff.next()), stop);
      take = true;
    }
  }
  if (seq > 0) {
    // The deadline (or a stop): a leave that finds the row gone was granted at that moment, and holds the name.
    std::int64_t was = std::exchange(seq, 0);
    try {
      auto lock = take_if_granted(name, owner, request, started, [&]() -> std::optional<QueuedFind> {
        if (with_read_retries([&] { return queue_->leave(name, owner, was); })) return std::nullopt;
        auto sent = local_now();
        auto look = with_read_retries([&] { return queue_->look(name, owner, was); });
        if (!granted_to_waiter(name, look.grant)) return std::nullopt;
        return QueuedFind{sent, queued_grant(*look.grant, sent, look.grant_left)};
      });
      if (lock) return lock;
    } catch (const Error& e) {
      last_error = e.what();
      logger_->warn("leaving the queue of lock '{}' at its deadline failed (the row lapses with its lease): {}", name,
                    e.what());
    }
  }
  return std::nullopt;
}

}  // namespace dblock::detail
