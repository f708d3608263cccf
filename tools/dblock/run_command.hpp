#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <dblock/occurrence.hpp>
#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include "dblock/logging.hpp"

namespace dblock::cli {

/// The shortest --ttl `run` accepts. Renewals every third of the lease, SIGTERM `grace` before its
/// local deadline and SIGKILL before it must all fit in it on a loaded host: leases of 50-100 ms
/// failed there (renewals late, the command killed at the deadline), 200 ms did not.
inline constexpr std::chrono::milliseconds kMinRunTtl{200};

struct RunRequest {
  std::string name;
  std::chrono::milliseconds ttl{30'000};
  std::chrono::milliseconds wait{0};
  std::chrono::milliseconds grace{10'000};  // SIGTERM this long before the local deadline; SIGKILL at it
  LockMode mode = LockMode::table;
  bool shared = false;
  std::int64_t permits = 0;                     // > 0: one of a semaphore's permits
  std::chrono::milliseconds min_hold{0};        // LockOptions::min_hold
  std::chrono::milliseconds lock_delay{0};      // LockOptions::lock_delay
  bool fair = false;                            // ManagerOptions::fair_queue (its place said on stderr)
  int ask_signal = 0;                           // sent to the command when the holder is asked to let go
  std::string note;                             // LockOptions::note
  std::optional<OccurrenceOptions> occurrence;  // --once-per/--occurrence: run once per occurrence
  std::vector<std::string> command;
  const Stderr* out = nullptr;             // where run's reports on its command go
  std::vector<int> inherited_descriptors;  // open when dblock started: the command's to inherit
};

/// The descriptors this process has open now; call before the Store opens any, for
/// RunRequest::inherited_descriptors.
[[nodiscard]] std::vector<int> descriptors_open_now();

/// Blocks SIGTERM/SIGINT/SIGHUP/SIGCHLD/SIGCONT for the calling thread and every thread started
/// later, so that run_guarded (and the reaper) can receive them synchronously. Call before any
/// dblock thread exists.
void block_forwarded_signals();

/// Holds the lock (renewed) while `command` runs; returns the command's exit status, or 70 when
/// the command was stopped because the lease was lost or about to run out, or its guard died. The
/// command runs in its own process group under a guard process that kills the group when this
/// process dies; this process is a child subreaper and releases only once no descendant is left.
/// Under a terminal, the command's group is the foreground one and follows job control.
int run_guarded(const std::shared_ptr<Store>& store, const RunRequest& request);

}  // namespace dblock::cli
