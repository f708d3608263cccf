#pragma once
// How `migrate up` and `repair` take the database-level migration lock on every dialect: the
// session's non-blocking try, polled with jittered, growing pauses (core's Backoff) until the
// deadline. Never a blocking wait, which could deadlock with a concurrent DDL.

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "backends/backend_errors.hpp"
#include "backends/migration_backend.hpp"
#include "core/backoff.hpp"

namespace dblock::detail {

/// @throws Timeout after `lock_timeout`.
inline void take_migration_lock(MigrationSession& session, std::chrono::milliseconds lock_timeout) {
  auto deadline = std::chrono::steady_clock::now() + lock_timeout;
  Backoff backoff(std::chrono::milliseconds(20), 2.0, std::chrono::milliseconds(500),
                  static_cast<std::uint64_t>(deadline.time_since_epoch().count()));
  // A try that failed with a transient error took nothing: busy, like a refusal. MariaDB under
  // Galera answered one with a lock-wait timeout (1205) while other schemas' DDL ran.
  auto try_lock = [&] {
    try {
      return session.try_lock();
    } catch (const TransientError&) {
      return false;
    }
  };
  while (!try_lock()) {
    auto delay = backoff.next();
    if (std::chrono::steady_clock::now() + delay > deadline)
      throw Timeout(
          fmt::format("another `dblock migrate` held the migration lock for longer than {}ms", lock_timeout.count()));
    std::this_thread::sleep_for(delay);
  }
}

}  // namespace dblock::detail
