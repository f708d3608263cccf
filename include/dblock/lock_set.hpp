#pragma once
/// LockSet: the guard of several locks taken all-or-nothing by LockManager::acquire_all or
/// try_acquire_all. It holds every lock it names or none: a failed acquisition releases what it
/// had taken before it throws or returns empty. Move-only; the destructor releases every lock, in
/// the reverse of the order they were taken, and never throws (failures are logged at warning
/// level); call release() to see errors. Not thread-safe: one thread at a time, like Lock.

#include <chrono>
#include <cstddef>
#include <string_view>
#include <vector>

#include <dblock/lock.hpp>

#include <dblock/export.hpp>

namespace dblock {

class LockManager;
namespace detail {
struct AsyncAccess;
}  // namespace detail

class DBLOCK_EXPORT LockSet {
 public:
  LockSet(LockSet&&) noexcept = default;
  LockSet& operator=(LockSet&& other) noexcept;
  LockSet(const LockSet&) = delete;
  LockSet& operator=(const LockSet&) = delete;
  ~LockSet();

  /// The locks, in the order they were taken: names sorted by their bytes, each once.
  [[nodiscard]] const std::vector<Lock>& locks() const noexcept { return locks_; }
  [[nodiscard]] std::size_t size() const noexcept { return locks_.size(); }
  /// The lock of `name`. @throws InvalidArgument when the set does not hold that name.
  [[nodiscard]] const Lock& at(std::string_view name) const;
  /// True once any of the locks is lost: the set as a whole is then no longer safe to act on.
  [[nodiscard]] bool lost() const;
  /// The earliest local deadline of the locks (see Lock::local_deadline).
  [[nodiscard]] std::chrono::steady_clock::time_point local_deadline() const;
  /// False after release() or after being moved from.
  [[nodiscard]] bool owns() const noexcept { return !locks_.empty(); }
  explicit operator bool() const noexcept { return owns(); }

  /// Releases every lock, the last taken first; all are released locally whatever fails.
  /// @throws NotHeld when already released; otherwise the first error a Lock::release threw
  ///         (LockLost, ConnectionError, DatabaseError), after every lock was tried.
  void release();

 private:
  friend class LockManager;
  friend struct detail::AsyncAccess;  // dblock/asio.hpp's acquire_all
  explicit LockSet(std::vector<Lock> locks) : locks_(std::move(locks)) {}
  void release_quietly() noexcept;

  std::vector<Lock> locks_;
};

}  // namespace dblock
