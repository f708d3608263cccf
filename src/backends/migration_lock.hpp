#pragma once
// How every server dialect takes its migration lock: a non-blocking try, polled with a growing
// pause until the deadline. Never a blocking wait, which could deadlock with a concurrent DDL.

#include <algorithm>
#include <chrono>
#include <thread>

#include <dblock/errors.hpp>
#include <fmt/format.h>

namespace dblock::detail {

/// Calls `try_lock` (true when taken) until it succeeds. @throws Timeout after `lock_timeout`.
template <class TryLock>
void poll_migration_lock(TryLock&& try_lock, std::chrono::milliseconds lock_timeout) {
  auto deadline = std::chrono::steady_clock::now() + lock_timeout;
  auto delay = std::chrono::milliseconds(20);
  while (!try_lock()) {
    if (std::chrono::steady_clock::now() + delay > deadline)
      throw Timeout(fmt::format("another `dblock migrate` held the migration lock for longer than {}ms",
                                lock_timeout.count()));
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace dblock::detail
