#pragma once
/// A Store is one database holding dblock's tables: a parsed URI and a bounded pool of sessions.
/// Thread-safe; share it (std::shared_ptr) between LockManagers, a Reaper and a Migrator.
///
/// URIs (doc/configuration.md):
///   `postgresql://user:pw@host:port/db?schema=s&prefix=p&pool=8` (plus everything libpq accepts,
///   including multi-host lists and target_session_attrs);
///   `mysql://user:pw@host:3306/db?prefix=p&pool=8` (or `mariadb://`; `socket=/path`);
///   `sqlite:///abs/path.db` or `sqlite://relative.db`, with `prefix` and `pool`.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/options.hpp>

#include <dblock/export.hpp>

namespace dblock {

namespace detail {
class Backend;
struct StoreParts;
}  // namespace detail

struct FenceTarget;
class FencedTransaction;
class LockSet;

/// What a row of the lock table stands for.
enum class LockState {
  held,      ///< its owner holds it (or held it: see `remaining`)
  revoked,   ///< revoked by an operator: unavailable until its lease ends or its holder lets go
  min_hold,  ///< released within its minimum hold: unavailable until the hold ends
  delayed,   ///< its lease ended without a release: unavailable until its lock-delay ends (`remaining`)
};

/// One row of the lock table as an operator sees it.
struct LockInfo {
  std::string name;
  std::string owner;
  std::int64_t count = 0;
  std::int64_t token = 0;
  /// Lease left by the database's clock; negative once expired (row not yet reaped). Revoked,
  /// min-hold and delayed rows: how long until the name is free.
  std::chrono::milliseconds remaining{0};
  /// Exclusive, or a semaphore's permit holder or a reader (one row per holder).
  HolderKind kind = HolderKind::exclusive;
  /// Store::locks() and Store::revoke(): revoked or kept for a minimum hold, `owner` then being
  /// the holder it was taken from.
  LockState state = LockState::held;
  /// The lock's lock-delay (LockOptions::lock_delay), 0 for none.
  std::chrono::milliseconds lock_delay{0};
  /// Time since this holder's grant (re-entries keep it), by the database's clock.
  std::chrono::milliseconds held_for{0};
  /// The holder's note (LockOptions::note, `dblock run --note`), empty for none. Any text: escape
  /// it before printing it to a terminal (dblock::terminal_safe), as every other field.
  std::string note;
};

/// One waiter of the fair queue (ManagerOptions::fair_queue; doc/fair-queue.md) as an operator sees
/// it. Waiters of managers without the fair queue, and of advisory and GET_LOCK modes, wait in their
/// own processes (or in the server's lock manager) and are not listed.
struct WaiterInfo {
  std::string name;
  std::string owner;
  HolderKind kind = HolderKind::exclusive;
  /// Its place among the name's live waiters in arrival order: 1 is granted the name next.
  std::int64_t position = 0;
  /// Time since it queued, by the database's clock.
  std::chrono::milliseconds waited{0};
};

/// What the lock table holds right now, by the database's clock.
struct LockCensus {
  std::int64_t held = 0;                         ///< rows with a live lease
  std::int64_t expired = 0;                      ///< rows whose lease ended and that no reaper has deleted yet
  std::chrono::milliseconds oldest_held_age{0};  ///< age of the oldest live grant (0 when none)
  std::int64_t queued = 0;                       ///< the fair queue's live waiters (Store::waiters())
};

class DBLOCK_EXPORT Store : public std::enable_shared_from_this<Store> {
 public:
  /// Parses the URI and opens one session to prove the server and credentials work.
  /// @throws InvalidArgument for a malformed URI, an unknown scheme or bad options;
  ///         ConnectionError when the server cannot be reached or refuses the login.
  [[nodiscard]] static std::shared_ptr<Store> open(std::string_view uri, StoreOptions options = {});

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// "postgresql", ...
  [[nodiscard]] std::string_view dialect() const noexcept;
  /// The URI with any password replaced by "***": safe to log.
  [[nodiscard]] const std::string& redacted_uri() const noexcept;

  /// Throws SchemaError unless the schema version is exactly the one this build knows.
  /// Checked once and remembered; LockManager calls it on construction.
  void check_schema();

  /// Every row in the lock table, live and expired, ordered by name.
  [[nodiscard]] std::vector<LockInfo> locks();
  /// The first `limit` rows by name; the others are not sent (a status page on a big table).
  [[nodiscard]] std::vector<LockInfo> locks(std::size_t limit);
  /// The row of `name` as locks() shows it (a group's first holder), or empty when there is none.
  /// One statement on the primary key. @throws InvalidArgument for a bad name.
  [[nodiscard]] std::optional<LockInfo> lock(std::string_view name);
  /// Operator's break-glass that keeps exclusion: revokes the holder of `name`. Its renewals fail
  /// from now on (it is told it lost the lock at its next renewal, `Lock::lost()`, `on_lost`), and
  /// the name becomes available to others only once the holder can no longer believe it holds it:
  /// when its lease ends as the database recorded it, or earlier when the holder lets go of it (its
  /// release; `dblock run` once its command is dead). A group's row (permits, readers) is revoked
  /// as a whole and stays until its lease ends. Returns the revoked row (`state` revoked, `owner`
  /// the holder, `remaining` the lease left: the name is free by then at the latest), or empty
  /// when no live lock was there.
  std::optional<LockInfo> revoke(std::string_view name);
  /// The polite way: asks the live exclusive holder of `name` to let go. Nothing is taken from it:
  /// its next renewal (within one renewal interval) tells it (`Lock::release_requested()`,
  /// ManagerOptions::on_release_requested; `dblock run --ask-signal` forwards it to its command),
  /// and it releases when its work allows. The request stands for that grant only: a later holder
  /// of the name is not asked. Asking twice is asking once. Table mode, plain locks: a group's
  /// members, advisory and GET_LOCK holders cannot be asked. Returns the row asked (its holder and
  /// token), or empty when no live exclusive holder was there (none, expired, a group, revoked, in
  /// its minimum hold). @throws InvalidArgument for a bad name.
  std::optional<LockInfo> request_release(std::string_view name);
  /// UNSAFE break-glass: deletes the row whoever holds it, at once. If the holder is alive, it and
  /// the next holder both run until the holder's next renewal; only for a holder known to be dead.
  /// Prefer revoke(). Returns whether a row existed.
  bool force_release(std::string_view name);
  /// The fair queue's live waiters (their waiter lease not ended), ordered by name, then arrival.
  /// One read-only statement. A waiter whose process died stays listed until its waiter lease ends.
  [[nodiscard]] std::vector<WaiterInfo> waiters();
  /// The first `limit` of them (a status page on a long queue).
  [[nodiscard]] std::vector<WaiterInfo> waiters(std::size_t limit);
  /// Counts live and expired rows (a full scan of the lock table: for metrics, not hot paths).
  [[nodiscard]] LockCensus census();
  /// Runs `work` in a transaction on one of this store's sessions, fenced by `target` (a held Lock
  /// or a name and token; include <dblock/fence.hpp>): commits when `work` returns, rolls back when
  /// it throws. @throws LockLost, nothing committed, when the grant is not the name's live holder
  /// at the fence, or when `work` runs a statement after the lease left at the fence ran out.
  void fenced(const FenceTarget& target, const std::function<void(FencedTransaction&)>& work);
  /// The same, fenced by every target (each name once), fenced in the order of their names so that
  /// fenced transactions on overlapping sets cannot deadlock: refused when any one is not its name's
  /// live holder; the transaction is bounded by the smallest lease left.
  void fenced(const std::vector<FenceTarget>& targets, const std::function<void(FencedTransaction&)>& work);
  /// The same, fenced by every lock of `locks`.
  void fenced(const LockSet& locks, const std::function<void(FencedTransaction&)>& work);

 private:
  friend struct detail::StoreParts;
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dblock
