#include "dblock/run_command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include <dblock/dblock.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dblock/exit_codes.hpp"
#include "dblock/run_occurrence.hpp"
#include "dblock/run_processes.hpp"
#include "dblock/run_terminal.hpp"

namespace dblock::cli {

using namespace detail;

namespace {

using Clock = std::chrono::steady_clock;

/// SIGKILL comes this long before the local deadline, so that a late wake-up of this process
/// (a loaded host) does not carry the command past it.
std::chrono::milliseconds kill_margin(const RunRequest& request) {
  return std::min<std::chrono::milliseconds>(request.grace / 2, std::chrono::seconds(1));
}

/// A signal `run` forwards to its command, taken if one is pending (0 when none): while `run` still
/// waits for the lock, it is the command's end before it started. Only those: a SIGCONT (a paused
/// `run` continued) or SIGCHLD stays pending for the command's loop.
int take_forwarded_signal() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int signal_number : kForwarded) sigaddset(&signals, signal_number);
  timespec now{};
  int taken = sigtimedwait(&signals, nullptr, &now);
  return taken > 0 ? taken : 0;
}

/// The wait for the lock, a slice at a time: a stop request (Ctrl-C, systemctl stop, timeout(1))
/// that comes while `run` waits ends it there, without running the command. Empty when one came.
std::optional<Lock> wait_for_lock(LockManager& manager, const RunRequest& request, const LockOptions& options,
                                  int& stopped_by) {
  constexpr std::chrono::milliseconds kSlice{250};
  auto started = Clock::now();
  while (true) {
    if ((stopped_by = take_forwarded_signal()) != 0) return std::nullopt;
    auto left = request.wait - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    try {
      return manager.acquire(request.name, std::clamp(left, std::chrono::milliseconds(0), kSlice), options);
    } catch (const Timeout&) {
      if (left <= kSlice)
        throw Timeout(fmt::format("lock '{}' was not acquired within {}", request.name, format_duration(request.wait)));
    }
  }
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
  LockManager manager(store, ManagerOptions{.mode = request.mode, .default_ttl = request.ttl});
  LockOptions options{.shared = request.shared, .permits = request.permits, .min_hold = request.min_hold,
                      .lock_delay = request.lock_delay};
  std::optional<Lock> lock;
  int stopped_by = 0;
  if (request.wait.count() > 0)
    lock = wait_for_lock(manager, request, options, stopped_by);
  else lock = manager.try_acquire(request.name, options);
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
  Pipe life, reports;
  Pipe handoff;  // the guard's to its command: the forwarded signals the group got before the command
  auto signals = wrapper_signals();
  Fd signal_fd(signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd) throw Error(ErrorCategory::database, fmt::format("signalfd failed: {}", std::strerror(errno)));
  // Whatever of the command outlives its parent is reparented here, not to init: the wrapper can
  // kill and reap it before releasing the lock, whether it left the group or its guard was killed.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  JobControl job_control;
  GuardSetup setup{.wrapper = getpid(),
                   .deadline = steady_nanoseconds(lock->local_deadline()),
                   .kill_margin = std::chrono::duration_cast<std::chrono::nanoseconds>(kill_margin(request)).count()};
  job_control.prepare(setup);
  auto told_deadline = lock->local_deadline();
  close_on_exec_all_but(request.inherited_descriptors);
  pid_t group = fork();
  if (group < 0) throw Error(ErrorCategory::database, fmt::format("fork failed: {}", std::strerror(errno)));
  if (group == 0) become_guard(exec, life, reports, handoff, setup);
  setpgid(group, group);  // also here: no signal may reach the group before it exists
  handoff.close_read();
  handoff.close_write();
  life.close_read();
  reports.close_write();
  fcntl(reports.read, F_SETFL, fcntl(reports.read, F_GETFL) | O_NONBLOCK);

  auto lease_gone = [&] { return lock->lost() || Clock::now() >= lock->local_deadline() - kill_margin(request); };
  // SIGTERM when the lease is lost or its local deadline is `grace` away; SIGKILL of the whole
  // group at the deadline (or `grace` after a certain loss, if that is sooner). Nothing here
  // waits on the database: the manager's timer marks the lock lost at the deadline whatever
  // its renewal is doing, and the deadline is read afresh on every turn.
  constexpr auto kPoll = std::chrono::milliseconds(100);
  std::optional<Clock::time_point> terminated_at;
  bool killed = false;
  bool command_stopped = false;
  std::optional<int> command_status;
  std::optional<int> exec_error;  // the command could not be started: its exec's errno
  std::optional<siginfo_t> guard_end;
  int left_behind = 0;  // processes of the command killed after it ended
  auto read_reports = [&] {
    Report report;
    while (read(reports.read, &report, sizeof report) == sizeof report) {
      if (report.kind == Report::exited) {
        command_status = report.value;
      } else if (report.kind == Report::exec_failed) {
        exec_error = report.value;
      } else if (report.kind == Report::continued) {
        command_stopped = false;
      } else {
        command_stopped = true;
        job_control.follow_stop(group, report.value, lease_gone, out);
      }
    }
  };
  while (!guard_end) {
    auto now = Clock::now();
    auto deadline = lock->local_deadline();
    if (deadline != told_deadline && !lock->lost()) {  // a renewal moved it: tell the guard
      auto nanoseconds = steady_nanoseconds(deadline);
      // A guard gone meanwhile (it killed the group at the old deadline) reads nothing: its end is
      // reaped below.
      life.send(&nanoseconds, sizeof nanoseconds);
      told_deadline = deadline;
    }
    bool lost = lock->lost();
    if (!terminated_at && (lost || now >= deadline - request.grace)) {
      out.say("warning", fmt::format("the lease on '{}' {} while the command ran; sending it SIGTERM", request.name,
                                     lost ? "was lost" : "could not be renewed and its deadline is near"));
      kill(-group, SIGTERM);
      if (command_stopped) kill(-group, SIGCONT);
      terminated_at = now;
    }
    auto kill_at = terminated_at ? std::min(deadline - kill_margin(request), *terminated_at + request.grace)
                                 : Clock::time_point::max();
    if (terminated_at && !killed && now >= kill_at) {
      out.say("error", fmt::format("the command did not stop before the lease on '{}' ran out; killing its "
                                   "process group",
                                   request.name));
      kill(-group, SIGKILL);
      killed = true;
    }
    // Wake for the next step due: SIGTERM before a termination, SIGKILL after it, else a poll.
    auto next = now + kPoll;
    if (!terminated_at) next = std::min(next, deadline - request.grace);
    else if (!killed) next = std::min(next, kill_at);
    auto slice = std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(next - now, Clock::duration(1'000'000)));
    auto timeout = timespec_of(slice.count());
    pollfd fds[2] = {{signal_fd.get(), POLLIN, 0}, {reports.read, POLLIN, 0}};
    ppoll(fds, 2, &timeout, nullptr);
    signalfd_siginfo info{};
    while (read(signal_fd.get(), &info, sizeof info) == sizeof info) {
      auto signal_number = static_cast<int>(info.ssi_signo);
      if (signal_number == SIGCHLD || signal_number == SIGCONT) continue;
      kill(-group, signal_number);
      if (command_stopped) kill(-group, SIGCONT);  // a stopped command would not see it
    }
    read_reports();
    // The guard reports the command's end before it kills what is left of the group: a leftover
    // seen dead of SIGKILL finds that report already in the pipe.
    guard_end = reap_orphans(group, [&] {
      read_reports();
      if (command_status) ++left_behind;
    });
  }
  // The guard writes the command's end to the pipe before it kills its group, itself included: a
  // guard found dead of SIGKILL after the last read may have left that report behind it.
  read_reports();
  job_control.restore(group);
  // The guard's zombie still holds the group's id. Nothing of the command may run on after the
  // release: neither its group (the guard may have been killed alone) nor what left it.
  kill(-group, SIGKILL);
  left_behind += kill_every_descendant(group, [&](const std::vector<pid_t>& waiting) {
    out.say("warning", fmt::format("the lock on '{}' stays held until {} process(es) of the command end that dblock "
                                   "cannot kill (pids {})",
                                   request.name, waiting.size(), fmt::join(waiting, ", ")));
  });
  if (exec_error) out.say("error", exec_failure_message(request.command.front(), *exec_error));
  if (command_status && left_behind > 0)
    out.say("warning", fmt::format("the command left {} process(es) running; they were killed before the lock on '{}' "
                                   "was released",
                                   left_behind, request.name));
  if (!command_status && !killed) {
    if (guard_end->si_code == CLD_EXITED) {
      out.say("error", fmt::format("the command under the lock '{}' could not be started (fork failed)", request.name));
    } else if (Clock::now() < told_deadline - kill_margin(request)) {
      out.say("error", fmt::format("the guard process of the command on '{}' was killed (signal {}); the command's "
                                   "process group and descendants were killed before the lock was released",
                                   request.name, guard_end->si_status));
    } else {
      out.say("error", fmt::format("the command was killed at the lease's local deadline on '{}' (dblock was stopped "
                                   "or too slow to renew it)",
                                   request.name));
    }
    terminated_at = Clock::now();
  }
  int result = command_status ? exit_status_of(*command_status) : 128 + SIGKILL;
  if (occurrence) record_occurrence_end(*occurrence, terminated_at ? kSoftware : result, request.name, out);
  try {
    lock->release();
  } catch (const LockLost& e) {
    out.say("error", e.what());
    return kSoftware;
  }
  return terminated_at ? kSoftware : result;
}

}  // namespace dblock::cli
