#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include "dblock/logging.hpp"

namespace dblock::cli {

struct RunRequest {
  std::string name;
  std::chrono::milliseconds ttl{30'000};
  std::chrono::milliseconds wait{0};
  std::chrono::milliseconds grace{10'000};  // SIGTERM this long before the local deadline; SIGKILL at it
  LockMode mode = LockMode::table;
  bool shared = false;
  std::int64_t permits = 0;  // > 0: one of a semaphore's permits
  std::vector<std::string> command;
  const Stderr* out = nullptr;  // where run's reports on its command go
};

/// Blocks SIGTERM/SIGINT/SIGCHLD for the calling thread and every thread started later, so that
/// run_guarded can receive them with sigtimedwait. Call before any dblock thread exists.
void block_forwarded_signals();

/// Holds the lock (renewed) while `command` runs; returns the command's exit status, or 70 when
/// the command was stopped because the lease was lost or about to run out. The command runs in its
/// own process group under a guard process that kills the group when this process dies.
int run_guarded(const std::shared_ptr<Store>& store, const RunRequest& request);

}  // namespace dblock::cli
