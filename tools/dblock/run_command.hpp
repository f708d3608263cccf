#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <dblock/options.hpp>
#include <dblock/store.hpp>

namespace dblock::cli {

struct RunRequest {
  std::string name;
  std::chrono::milliseconds ttl{30'000};
  std::chrono::milliseconds wait{0};
  LockMode mode = LockMode::table;
  bool shared = false;
  std::vector<std::string> command;
};

/// Blocks SIGTERM/SIGINT/SIGCHLD for the calling thread and every thread started later, so that
/// run_guarded can receive them with sigtimedwait. Call before any dblock thread exists.
void block_forwarded_signals();

/// Holds the lock (renewed) while `command` runs; returns the command's exit status.
int run_guarded(const std::shared_ptr<Store>& store, const RunRequest& request);

}  // namespace dblock::cli
