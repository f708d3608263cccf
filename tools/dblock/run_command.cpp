#include "dblock/run_command.hpp"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <stop_token>
#include <thread>

#include <fmt/format.h>
#include <dblock/dblock.hpp>

#include "dblock/exit_codes.hpp"
#include "dblock/run_occurrence.hpp"
#include "dblock/run_processes.hpp"
#include "dblock/run_supervision.hpp"

namespace dblock::cli {

using namespace detail;

namespace {

/// A signal `run` forwards to its command, taken if one is pending or comes within `within` (0 when
/// none): while `run` still waits for the lock, it is the command's end before it started. Only
/// those: a SIGCONT (a paused `run` continued) or SIGCHLD stays pending for the command's loop.
int take_forwarded_signal(std::chrono::milliseconds within = std::chrono::milliseconds(0)) {
  sigset_t signals;
  sigemptyset(&signals);
  for (int signal_number : kForwarded) sigaddset(&signals, signal_number);
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(within);
  timespec wait{.tv_sec = static_cast<time_t>(seconds.count()),
                .tv_nsec = static_cast<long>(std::chrono::nanoseconds(within - seconds).count())};
  int taken = sigtimedwait(&signals, nullptr, &wait);
  return taken > 0 ? taken : 0;
}

/// The wait for the lock, in one call (a fair-queue waiter keeps its place): a stop request
/// (Ctrl-C, systemctl stop, timeout(1)) that comes meanwhile is taken by a watcher thread, which
/// stops the wait (LockManager::acquire's stop token); `stopped_by` then names it, and the command
/// is not run. The lock, when it was granted (a grant at the moment of the stop, too: the caller
/// lets it go).
std::optional<Lock> wait_for_lock(LockManager& manager, const RunRequest& request, const LockOptions& options,
                                  int& stopped_by) {
  constexpr std::chrono::milliseconds kSignalLook{100};
  std::stop_source stop_wait;
  std::atomic<int> taken{0};
  std::optional<Lock> lock;
  {
    std::jthread watcher([&](const std::stop_token& waited) {
      while (!waited.stop_requested()) {
        if (int signal_number = take_forwarded_signal(kSignalLook); signal_number != 0) {
          taken = signal_number;
          stop_wait.request_stop();
          return;
        }
      }
    });
    try {
      lock = manager.acquire(request.name, request.wait, options, stop_wait.get_token());
    } catch (const Timeout&) {
      if (!stop_wait.stop_requested()) throw;
    }
  }  // the watcher is stopped and joined
  stopped_by = taken;
  return lock;
}

}  // namespace

std::vector<int> descriptors_open_now() { return open_descriptors(); }

void block_forwarded_signals() {
  auto set = wrapper_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int run_guarded(const std::shared_ptr<Store>& store, const RunRequest& request) {
  Stderr plain(false);
  const Stderr& out = request.out != nullptr ? *request.out : plain;
  // No on_lost callback: Lock::lost() turns true when it fires, and also at the deadline.
  // A fair waiter says where it queued, as `run`'s other reports do (on stderr).
  std::function<void(std::string_view, std::int64_t)> say_place;
  if (request.fair)
    say_place = [&out, name = request.name](std::string_view, std::int64_t position) {
      out.say("info", fmt::format("waiting for lock '{}': place {} in its queue", name, position));
    };
  LockManager manager(store, ManagerOptions{.mode = request.mode,
                                            .default_ttl = request.ttl,
                                            .fair_queue = request.fair,
                                            .on_queued = std::move(say_place)});
  LockOptions options{.shared = request.shared,
                      .permits = request.permits,
                      .min_hold = request.min_hold,
                      .lock_delay = request.lock_delay,
                      .note = request.note};
  std::optional<Lock> lock;
  int stopped_by = 0;
  if (request.wait.count() > 0)
    lock = wait_for_lock(manager, request, options, stopped_by);
  else
    lock = manager.try_acquire(request.name, options);
  // A stop request that came while the lock was being taken (or the store opened) ends `run` here
  // too: forwarded later, it would reach a group the command is not in yet.
  if (stopped_by == 0) stopped_by = take_forwarded_signal();
  if (stopped_by != 0) {
    out.say("warning", fmt::format("{} before the command started (lock '{}'): the command was not run",
                                   strsignal(stopped_by), request.name));
    return 128 + stopped_by;
  }
  if (!lock) throw Timeout(fmt::format("lock '{}' is held by another owner", request.name));
  // Claimed under the lock, recorded before it is released: a host granted the lock next finds the
  // outcome, never a 'running' record it would take for abandoned.
  auto occurrence = request.occurrence ? claim_occurrence(store, *lock, *request.occurrence, request.name, out)
                                       : std::optional<Occurrence>();
  if (request.occurrence && !occurrence) return kTempFail;

  // The fence's arguments (doc/sql-contract.md): a permit's or a reader's own owner id and kind; a
  // plain lock's owner is this thread's, which acquired it.
  FenceTarget held(*lock);
  auto exec = prepare_exec(request, CommandGrant{.token = held.token,
                                                 .owner = held.owner.empty() ? manager.owner_id() : held.owner,
                                                 .kind = holder_kind_name(held.kind)});
  CommandSupervision supervision(*lock, request, out);
  supervision.run(exec);
  int result = supervision.cut_short() ? kSoftware : supervision.result();
  if (occurrence) record_occurrence_end(*occurrence, result, request.name, out);
  try {
    lock->release();
  } catch (const LockLost& e) {
    out.say("error", e.what());
    return kSoftware;
  }
  return result;
}

}  // namespace dblock::cli
