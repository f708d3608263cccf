#pragma once
// LockMode::table: a row per lock with a lease, the renewal watchdog, waiting woken by release
// notifications (or backoff), and the resolution of statements whose outcome is unknown.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/group_backend.hpp"
#include "backends/lock_backend.hpp"
#include "backends/notification_backend.hpp"
#include "backends/queue_backend.hpp"
#include "backends/role.hpp"
#include "core/combiner.hpp"
#include "core/key_gates.hpp"
#include "core/manager_base.hpp"
#include "core/write_behind.hpp"

namespace dblock::detail {

class TableCore final : public ManagerBase {
 public:
  TableCore(std::shared_ptr<Store> store, ManagerOptions options);

  std::optional<Lock> try_acquire(std::string_view name, const LockOptions& options) override;
  Lock acquire(std::string_view name, std::chrono::milliseconds timeout, const LockOptions& options,
               const std::stop_token& stop = {}) override;
  using ManagerBase::acquire;
  using ManagerBase::try_acquire;
  void release(const std::shared_ptr<HeldLock>& held) override;
  void prepare_hand_over(HeldLock& held, std::string_view successor) override;

 private:
  using Key = std::tuple<std::string, std::string, HolderKind>;  // owner, name, kind

  LockBackend& locks_;
  Role<GroupBackend> groups_;  // absent: permits and shared locks are refused with its reason
  /// ManagerOptions::fair_queue: waiters queue as rows and releases hand the name on (table_queue.cpp).
  QueueBackend* queue_ = nullptr;

  /// What one acquisition asks for: a plain lock, or membership of a group (permit, shared).
  struct Request {
    HolderKind kind = HolderKind::exclusive;
    std::int64_t capacity = 0;  // permits
    std::chrono::milliseconds ttl{0};
    std::chrono::milliseconds min_hold{0};
    std::chrono::milliseconds lock_delay{0};
    std::string note;  // LockOptions::note, written after a fresh grant
  };

  /// From the constructor: concurrent plain acquisitions and last-level releases go out combined.
  void start_combining(CombinerLimits limits);
  bool watchdog_cycle() override;
  std::vector<std::shared_ptr<HeldLock>> held_snapshot() override;
  void deadline_passed(const std::shared_ptr<HeldLock>& held) override;
  Request request_of(const LockOptions& options) const;
  /// A fresh grant's note (Request::note), one statement; a failure is only logged.
  void write_note(std::string_view name, const std::string& owner, const Grant& grant, const Request& request);
  /// One try: the statement, and on a grant the record and the guard. `waiting_since`: when the
  /// caller's wait began (counted on a grant), empty for a try without waiting.
  std::optional<Lock> attempt(std::string_view name, const std::string& owner, const Request& request,
                              std::optional<SteadyClock::time_point> waiting_since);
  /// A grant, and when it was found by reading the row after a lost reply, the end of the lease
  /// that row showed: the row may be an earlier lease of this owner (one whose guard was dropped
  /// without its release landing), whose lease ends before this request's TTL would.
  struct Granted {
    Grant grant;
    std::optional<SteadyClock::time_point> lease_ends_by;
  };
  std::optional<Granted> acquire_once(std::string_view name, const std::string& owner, const Request& request);
  std::optional<Granted> resolve_unknown_acquire(std::string_view name, const std::string& owner);
  /// How long a waiter may sleep: until the lease on `name` ends, or for a member until the first
  /// member's does; an exclusive waiter marks itself as a waiting writer where readers hold the
  /// name (`marked` then turns true).
  std::optional<std::chrono::milliseconds> lease_left_for_waiter(std::string_view name, const std::string& owner,
                                                                 const Request& request, bool& marked);
  /// Records a grant; returns the record and the one it replaced (our own earlier lease on the
  /// name, expired and taken over afresh), if any. @throws ConnectionError for a grant whose reply
  /// came after its lease could have ended (given back).
  std::pair<std::shared_ptr<HeldLock>, std::shared_ptr<HeldLock>> record_grant(std::string_view name,
                                                                               const std::string& owner,
                                                                               const Request& request,
                                                                               SteadyClock::time_point sent,
                                                                               const Granted& granted);
  /// The fair queue (table_queue.cpp): whether `owner`'s `request` for `name` waits in it (plain
  /// exclusive locks without a lock-delay or minimum hold, owners by thread, when the manager opted
  /// in; never a re-entry).
  bool queues(std::string_view name, const std::string& owner, const Request& request);
  /// Whether `grant`, a live row of the waiter's owner that the queue's statements show it, was
  /// granted to this waiter: one level, under a token no guard of ours had (a guard lost and not
  /// yet released, or released with its reply lost, owns that row, and its release deletes it).
  bool granted_to_waiter(std::string_view name, const std::optional<Grant>& grant);
  /// Waits in the queue until `deadline`, or until `stop` is requested: the lock, or empty then (the
  /// waiter left the queue; a grant that met its leave is taken). `tried`: a try was refused first
  /// (else the first turn that queues counts the contention). `last_error`: the last error ridden out.
  std::optional<Lock> wait_in_queue(std::string_view name, const std::string& owner, const Request& request,
                                    SteadyClock::time_point started, SteadyClock::time_point deadline, bool tried,
                                    const std::stop_token& stop, std::string& last_error);
  /// A grant the queue showed this waiter, and when the statement that showed it was sent.
  struct QueuedFind {
    SteadyClock::time_point sent;
    Granted granted;
  };
  /// Runs `find` (the waiter's statements and what it makes of their answers) through the owner's
  /// gate of `name`, as every statement of one owner on one name goes, and records the grant it
  /// returns under the same pass: the lock, or empty when it found none. (table_queue.cpp only.)
  template <class Find>
  std::optional<Lock> take_if_granted(std::string_view name, const std::string& owner, const Request& request,
                                      SteadyClock::time_point started, Find&& find);
  static Granted queued_grant(Grant grant, SteadyClock::time_point sent, std::chrono::milliseconds left);
  /// Leaves the queue; a grant that met the leave goes on to the next waiter. Failures are logged.
  void leave_queue(std::string_view name, const std::string& owner, std::int64_t seq) noexcept;
  /// The grant `handed` (a release's report, ReleaseHub) when it is this wait's (`seq`) and a turn
  /// sent at `queued_by_turn` bounds its lease, recently enough: the lock, without a read.
  std::optional<Lock> take_handed_grant(std::string_view name, const std::string& owner, const Request& request,
                                        SteadyClock::time_point started, const std::optional<HandedGrant>& handed,
                                        std::int64_t seq, std::optional<SteadyClock::time_point> queued_by_turn);
  /// ManagerOptions::on_queued, with the place of waiter `seq` (read only when it is set).
  void report_queued(std::string_view name, std::int64_t seq) noexcept;
  /// When `owner`, queued for `name`, holds a name of this manager: reads the wait graph and, when its
  /// wait closes a cycle of which it is the waiter told (wait_cycle.hpp), throws Deadlock. A failed
  /// read is logged: the next renewal of its waiter lease looks again.
  void throw_if_deadlocked(std::string_view name, const std::string& owner);
  /// Gives back a level this manager was granted but does not hand out (a late reply, a re-entry
  /// of a lost grant); on failure the level lapses with its lease.
  void give_back(std::string_view name, const std::string& owner, HolderKind kind, std::int64_t token);
  /// `first_try`: Combine::alone for a release that has just failed in a batch.
  std::optional<std::int64_t> release_once(const HeldLock& held, std::int64_t depth_before,
                                           std::chrono::milliseconds min_hold, Combine first_try = Combine::yes);
  /// A release whose reply was lost, never sent again: the row read; one still ours is remembered as
  /// unsettled. Returns the levels left as release_once does (empty, too, for a row revoked from it).
  std::optional<std::int64_t> resolve_unknown_release(const HeldLock& held, std::int64_t depth_before);
  void remember_unsettled(const HeldLock& held);                       // REQUIRES: mutex_ not held
  void remember_unsettled(std::string_view name, std::int64_t token);  // REQUIRES: mutex_ not held
  /// The writer's statement for releases written behind (on its thread, which runs no user code):
  /// one for the batch; after a lost reply each row read, after any other failure each again alone.
  void write_released(const std::vector<std::shared_ptr<HeldLock>>& batch);
  /// After a last release found the row not ours: a revocation is acknowledged. A release written
  /// behind only logs what it found: its caller was told the grant's end when it was queued.
  bool settle_not_ours(const std::shared_ptr<HeldLock>& held, bool written_behind);
  /// After the last release found the row not ours: if it was revoked from this grant, lets go of
  /// it (the name is free now). Returns whether it was.
  bool acknowledge_revocation(const HeldLock& held);
  /// Renews `refs` (plain locks and group members, each set in one statement): positions in
  /// `refs` renewed, and those a transaction holds (busy).
  Renewal renew_all(const std::vector<HeldRef>& refs, SteadyClock::time_point reply_by);
  void forget(const std::shared_ptr<HeldLock>& held);  // REQUIRES: mutex_ held
  void mark_lost(const std::shared_ptr<HeldLock>& held, std::string_view why);

  std::map<Key, std::shared_ptr<HeldLock>> held_;
  /// One owner's statements on one name go one at a time (taken before mutex_): a release racing
  /// a re-entry of the same owner (a guard released on another thread, OwnerScope::manager) could
  /// otherwise delete the row whose count the re-entry had just raised.
  KeyGates<Key> gates_;
  /// (name, token) of releases whose reply was lost while the row was still ours: the abandoned
  /// DELETE or decrement may land later, so an acquisition whose reply is lost too is never
  /// resolved by reading that row. Guarded by mutex_; bounded (the oldest go: by then the
  /// statement has long landed or died).
  std::set<std::pair<std::string, std::int64_t>> unsettled_releases_;
  std::deque<std::pair<std::string, std::int64_t>> unsettled_order_;  // oldest first, for the bound
  /// (name, token) of every grant a guard of this manager may still release, lost or not, until
  /// its last level is released: a lost-reply acquisition of the same owner never takes such a row
  /// for its own grant, since that guard's release would delete it. Guarded by mutex_.
  std::multiset<std::pair<std::string, std::int64_t>> unreleased_;
  /// Plain acquisitions and last-level releases, combined (empty: one statement per request).
  std::unique_ptr<Combiner<AcquireRequest, std::optional<Grant>>> acquires_;
  std::unique_ptr<Combiner<ReleaseRequest, bool>> releases_;
  /// Last, so that it goes first: its thread sends what is queued while all the above is there.
  std::unique_ptr<WriteBehind<std::shared_ptr<HeldLock>>> written_behind_;
};

}  // namespace dblock::detail
