#pragma once
/// LockManager hands out Lock guards for names such as "orders/42". It owns an owner identity
/// (host + pid + random nonce + manager sequence, plus the thread under OwnerScope::thread), a
/// watchdog thread that renews every held lock in one statement per cycle, and the wait policy.
/// Thread-safe. Locks may outlive the manager object: they keep its state alive. Whichever of
/// them goes last stops and joins the watchdog on the calling thread, so that may wait for a
/// renewal in flight (bounded by the statement timeout); dropping the last one inside on_lost
/// leaves the watchdog to finish on its own, so do not end the process from there.
///
/// Example:
///   auto store = dblock::Store::open("postgresql://app:pw@db/app");
///   dblock::LockManager locks(store, {.default_ttl = 30s});
///   if (auto lock = locks.try_acquire("nightly-report")) { run(lock->token()); }
///   auto order = locks.acquire("orders/42", 5s);   // throws dblock::Timeout after 5 s

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/advisory_key.hpp>
#include <dblock/lock.hpp>
#include <dblock/lock_set.hpp>
#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include <dblock/export.hpp>

namespace dblock {

/// Monotonic counters of one manager; read with LockManager::stats().
struct ManagerStats {
  std::uint64_t acquired = 0;           ///< grants, re-entries included
  std::uint64_t contended = 0;          ///< tries that found another live owner
  std::uint64_t timeouts = 0;           ///< acquire() calls that gave up
  std::uint64_t renewals = 0;           ///< renewal statements that succeeded
  std::uint64_t lost = 0;               ///< leases lost while held
  std::uint64_t retried = 0;            ///< statements run again after a deadlock, lock-wait timeout or busy database
  std::chrono::milliseconds waited{0};  ///< total time spent waiting in acquire()
  std::uint64_t combined = 0;           ///< acquisitions and releases sent in one statement with others (table mode)
  std::uint64_t written_behind = 0;     ///< releases that returned before their statement (write_behind_releases)
  std::uint64_t grants_unread = 0;  ///< fair-queue grants taken as the release that made them reported them (no read)
};

class DBLOCK_EXPORT LockManager {
 public:
  /// @throws InvalidArgument for bad options; SchemaError when dblock's tables are missing or
  ///         of another version ("run dblock migrate up").
  explicit LockManager(std::shared_ptr<Store> store, ManagerOptions options = {});
  ~LockManager();
  LockManager(const LockManager&) = delete;
  LockManager& operator=(const LockManager&) = delete;

  /// One round trip. Returns an empty optional when another owner holds a live lease.
  /// @throws InvalidArgument (name, TTL), ConnectionError, DatabaseError.
  [[nodiscard]] std::optional<Lock> try_acquire(std::string_view name, LockOptions options = {});

  /// Waits up to `timeout` (0 = one try). PostgreSQL wakes waiters on release (LISTEN/NOTIFY)
  /// and at the holder's lease end; other backends poll with jittered exponential backoff.
  /// @throws Timeout when the lock was not granted in time; Deadlock (a fair-queue waiter closing a
  ///         cycle: ManagerOptions::fair_queue); plus what try_acquire throws.
  [[nodiscard]] Lock acquire(std::string_view name, std::chrono::milliseconds timeout, LockOptions options = {});
  /// The same wait, which a request on `stop` ends as its deadline would, only sooner: the lock when
  /// it was granted at that very moment (a fair-queue waiter's leave found its grant), else Timeout,
  /// whose message says the wait was stopped. Table mode's waits end at once; advisory and GET_LOCK
  /// waits within 250 ms (with a token that can be stopped they wait in the server in slices of that
  /// length). A fair-queue waiter keeps its place until then: this, not a loop of short timeouts
  /// that would queue again at the back each time, is how to wait interruptibly.
  [[nodiscard]] Lock acquire(std::string_view name, std::chrono::milliseconds timeout, LockOptions options,
                             std::stop_token stop);

  /// All or nothing: one try for each of `names` (each name once, taken in the order of their
  /// bytes). Returns empty, holding none of them, when any is held by another owner.
  /// @throws InvalidArgument (no names, a bad name or TTL) before anything is sent, plus what
  ///         try_acquire throws; what was taken by then is released first.
  [[nodiscard]] std::optional<LockSet> try_acquire_all(const std::vector<std::string>& names, LockOptions options = {});

  /// All or nothing, waiting up to `timeout` in total. Names are taken one by one in the order
  /// of their bytes, waiting for each in turn, so that sets which overlap never deadlock; what
  /// was taken is held while the next is awaited. On failure every lock taken is released before
  /// the call throws (a release the database does not answer leaves that row to lapse with its lease).
  /// @throws Timeout (naming the name not granted), plus what try_acquire_all throws.
  [[nodiscard]] LockSet acquire_all(const std::vector<std::string>& names, std::chrono::milliseconds timeout,
                                    LockOptions options = {});

  /// Advisory mode only: an explicit key, e.g. AdvisoryKey::of(42) to exclude a `psql` session
  /// holding pg_advisory_lock(42). Named locks map to AdvisoryKey::from_name(name).
  /// @throws InvalidArgument in table mode.
  [[nodiscard]] std::optional<Lock> try_acquire(const AdvisoryKey& key, LockOptions options = {});
  [[nodiscard]] Lock acquire(const AdvisoryKey& key, std::chrono::milliseconds timeout, LockOptions options = {});

  /// The owner id written into rows by the calling thread.
  [[nodiscard]] std::string owner_id() const;
  [[nodiscard]] ManagerStats stats() const;

 private:
  std::shared_ptr<detail::ManagerBase> core_;
};

}  // namespace dblock
