#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace dblock::detail {

/// "host:pid:nonce[:tag]" — host alone collides between processes, host+pid after a restart in a
/// container (pid 1 again), so a random 64-bit nonce per manager makes it unique.
[[nodiscard]] std::string make_manager_owner_id(std::string_view tag);
/// A random id for the calling thread, drawn once per thread, never 0: thread ids of exited
/// threads are reused by the OS and std::thread::id, which would let a new thread re-enter an old
/// one's lock.
[[nodiscard]] std::uint64_t this_thread_owner_nonce();
/// While alive, this_thread_owner_nonce() on this thread returns `nonce` instead (never 0): the
/// owner of an asynchronous task (dblock/asio.hpp) whose statement runs on a pool thread, so
/// that the task, not the thread, is the owner wherever it resumes. Nests.
class ScopedOwnerNonce {
 public:
  explicit ScopedOwnerNonce(std::uint64_t nonce);
  ~ScopedOwnerNonce();
  ScopedOwnerNonce(const ScopedOwnerNonce&) = delete;
  ScopedOwnerNonce& operator=(const ScopedOwnerNonce&) = delete;

 private:
  std::uint64_t previous_;
};
/// "<manager_owner>:t<nonce as 16 hex digits>": the owner id of one thread of a manager.
[[nodiscard]] std::string thread_owner_id(std::string_view manager_owner, std::uint64_t nonce);

}  // namespace dblock::detail
