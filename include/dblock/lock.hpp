#pragma once
/// Lock: the RAII guard of one acquisition. Move-only. The destructor releases and never throws
/// (a failed release is logged at warning level); call release() to see errors.
/// A guard may be moved to, and released from, another thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>

#include <dblock/export.hpp>

namespace dblock {

struct FenceTarget;
namespace detail {
struct HeldLock;
class ManagerBase;
struct AsyncAccess;
}  // namespace detail

class DBLOCK_EXPORT Lock {
 public:
  Lock(Lock&& other) noexcept;
  Lock& operator=(Lock&& other) noexcept;
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  ~Lock();

  [[nodiscard]] const std::string& name() const;
  /// Fencing token: strictly greater than every token granted earlier for this name. Re-entries
  /// share the token of the first acquisition. Each member of a group (permits, readers) has a
  /// token of its own, drawn when its membership begins (a reader's membership taken afresh while
  /// its row lives keeps it, so members' tokens need not rise in the order they are believed);
  /// every later exclusive grant exceeds them. Pass it to the resource you protect. Thread-safe.
  /// Advisory mode (PostgreSQL advisory locks, MySQL GET_LOCK) draws it when first asked for, on
  /// the session that holds the lock (one round trip, which also proves the lock alive then), so
  /// a holder that never asks pays nothing for it; later calls return the same value.
  /// @throws NotHeld after release(); LockLost when it must be drawn and the lock is gone.
  [[nodiscard]] std::int64_t token() const;
  /// Re-entrancy depth this guard stands for (1 for the outermost acquisition).
  [[nodiscard]] std::int64_t count() const noexcept { return count_; }
  /// True once the lease was found gone, taken over or unrenewable. Thread-safe.
  [[nodiscard]] bool lost() const;
  /// True once a renewal of this grant found it asked to let go (Store::request_release, `dblock
  /// release --ask`): a request, not a loss; the lock stays held until released. Table mode, plain
  /// locks. Thread-safe. ManagerOptions::on_release_requested is called at the same moment.
  /// @throws NotHeld after release() or when moved from.
  [[nodiscard]] bool release_requested() const;
  /// A stop token requested when this grant is lost: a renewal found it expired, taken over or
  /// revoked, its local deadline passed before a renewal succeeded (the deadline timer requests it
  /// at that deadline), its release found it gone, or its manager ended while it was held. Not
  /// requested by a release. Every re-entrant guard of one grant shares it; it stays valid after
  /// release() and after the guard is gone. Work written for C++20 cooperative cancellation
  /// (std::jthread, std::stop_callback) stops by itself. Thread-safe; the request and its
  /// callbacks run on the thread that found the loss (the manager's watchdog or deadline timer,
  /// or the releasing thread), like ManagerOptions::on_lost, and must not block.
  /// @throws NotHeld after release() or when moved from.
  [[nodiscard]] std::stop_token stop_token() const;
  /// Steady-clock instant before which the lease cannot have run out, however the database's
  /// clock runs: request send time + TTL, moved forward by each successful renewal. Advisory
  /// locks have no lease: time_point::max() (watch lost(), or the on_lost callback). On a
  /// dblock::testing store it is on the test's local clock (TestStore::local_now()).
  [[nodiscard]] std::chrono::steady_clock::time_point local_deadline() const;
  /// False after release() or after being moved from.
  [[nodiscard]] bool owns() const noexcept { return held_ != nullptr; }
  explicit operator bool() const noexcept { return owns(); }

  /// Releases this acquisition (one re-entrancy level).
  /// @throws NotHeld when already released; LockLost when the lease had been lost (the row is
  ///         left to its new owner); ConnectionError/DatabaseError when the database failed (the
  ///         guard is then released locally and the row expires with its lease).
  void release();

  /// Releases this acquisition, its last level, handing the name in the same commit to the waiter
  /// whose owner id is `successor` (LockManager::owner_id() of its thread, or as Store::waiters()
  /// lists it) when that waiter waits live, ahead of waiters queued before it; else to the first
  /// live waiter, as release() does. The name is never free between the two owners. Needs a manager
  /// with ManagerOptions::fair_queue and a plain exclusive lock; the successor's acquisition must
  /// be waiting through a fair-queue manager too (its waiter row is what is granted).
  /// @throws InvalidArgument (the lock stays held) when the manager has no fair queue, the lock is
  ///         a group's or re-entered (more than one level held) or has a minimum hold, or
  ///         `successor` is not an owner id; else as release().
  void hand_over(std::string_view successor);

 private:
  friend class detail::ManagerBase;
  friend struct detail::AsyncAccess;  // dblock/asio.hpp: empty guards for failed completions
  friend struct FenceTarget;          // dblock/fence.hpp: a member's fence names its owner and kind
  Lock(std::shared_ptr<detail::ManagerBase> core, std::shared_ptr<detail::HeldLock> held, std::int64_t count);

  std::shared_ptr<detail::ManagerBase> core_;
  std::shared_ptr<detail::HeldLock> held_;
  std::int64_t count_ = 0;
};

}  // namespace dblock
