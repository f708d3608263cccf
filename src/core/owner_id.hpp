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
/// "<manager_owner>:t<nonce as 16 hex digits>": the owner id of one thread of a manager.
[[nodiscard]] std::string thread_owner_id(std::string_view manager_owner, std::uint64_t nonce);

}  // namespace dblock::detail
