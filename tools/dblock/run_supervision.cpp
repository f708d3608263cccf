#include "dblock/run_supervision.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <dblock/errors.hpp>

namespace dblock::cli::detail {

namespace {

/// SIGKILL comes this long before the local deadline, so that a late wake-up of this process
/// (a loaded host) does not carry the command past it.
std::chrono::milliseconds kill_margin(const RunRequest& request) {
  return std::min<std::chrono::milliseconds>(request.grace / 2, std::chrono::seconds(1));
}

int make_signal_fd() {
  auto signals = wrapper_signals();
  int fd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) throw Error(ErrorCategory::database, fmt::format("signalfd failed: {}", std::strerror(errno)));
  return fd;
}

}  // namespace

CommandSupervision::CommandSupervision(Lock& lock, const RunRequest& request, const Stderr& out)
    : lock_(lock), request_(request), out_(out), kill_margin_(kill_margin(request)), signal_fd_(make_signal_fd()) {}

bool CommandSupervision::lease_gone() const {
  return lock_.lost() || Clock::now() >= lock_.local_deadline() - kill_margin_;
}

void CommandSupervision::run(Exec& exec) {
  start_guard(exec);
  constexpr auto kPoll = std::chrono::milliseconds(100);
  while (!guard_end_) {
    auto now = Clock::now();
    tell_guard_a_moved_deadline();
    stop_when_due(now);
    auto slice = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::max(std::min(next_step(now), now + kPoll) - now, Clock::duration(1'000'000)));
    auto timeout = timespec_of(slice.count());
    pollfd fds[2] = {{signal_fd_.get(), POLLIN, 0}, {reports_.read, POLLIN, 0}};
    ppoll(fds, 2, &timeout, nullptr);
    forward_signals();
    pass_on_release_request();
    read_reports();
    // The guard reports the command's end before it kills what is left of the group: a leftover
    // seen dead of SIGKILL finds that report already in the pipe.
    guard_end_ = reap_orphans(group_, [&] {
      read_reports();
      if (command_status_) ++left_behind_;
    });
  }
  // The guard writes the command's end to the pipe before it kills its group, itself included: a
  // guard found dead of SIGKILL after the last read may have left that report behind it.
  read_reports();
  job_control_.restore(group_);
  kill_what_is_left();
  say_how_it_ended();
}

int CommandSupervision::result() const { return command_status_ ? exit_status_of(*command_status_) : 128 + SIGKILL; }

void CommandSupervision::start_guard(Exec& exec) {
  // Whatever of the command outlives its parent is reparented here, not to init: the wrapper can
  // kill and reap it before releasing the lock, whether it left the group or its guard was killed.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  GuardSetup setup{.wrapper = getpid(),
                   .deadline = steady_nanoseconds(lock_.local_deadline()),
                   .kill_margin = std::chrono::duration_cast<std::chrono::nanoseconds>(kill_margin_).count(),
                   .ask_signal = request_.ask_signal};
  job_control_.prepare(setup);
  told_deadline_ = lock_.local_deadline();
  close_on_exec_all_but(request_.inherited_descriptors);
  group_ = fork();
  if (group_ < 0) throw Error(ErrorCategory::database, fmt::format("fork failed: {}", std::strerror(errno)));
  if (group_ == 0) become_guard(exec, life_, reports_, handoff_, setup);
  setpgid(group_, group_);  // also here: no signal may reach the group before it exists
  handoff_.close_read();
  handoff_.close_write();
  life_.close_read();
  reports_.close_write();
  fcntl(reports_.read, F_SETFL, fcntl(reports_.read, F_GETFL) | O_NONBLOCK);
}

void CommandSupervision::tell_guard_a_moved_deadline() {
  auto deadline = lock_.local_deadline();
  if (deadline == told_deadline_ || lock_.lost()) return;
  auto nanoseconds = steady_nanoseconds(deadline);
  // A guard gone meanwhile (it killed the group at the old deadline) reads nothing: its end is
  // reaped by the loop.
  life_.send(&nanoseconds, sizeof nanoseconds);
  told_deadline_ = deadline;
}

void CommandSupervision::stop_when_due(Clock::time_point now) {
  auto deadline = lock_.local_deadline();
  bool lost = lock_.lost();
  if (!terminated_at_ && (lost || now >= deadline - request_.grace)) {
    out_.say("warning", fmt::format("the lease on '{}' {} while the command ran; sending it SIGTERM", request_.name,
                                    lost ? "was lost" : "could not be renewed and its deadline is near"));
    kill(-group_, SIGTERM);
    if (command_stopped_) kill(-group_, SIGCONT);
    terminated_at_ = now;
  }
  if (terminated_at_ && !killed_ && now >= std::min(deadline - kill_margin_, *terminated_at_ + request_.grace)) {
    out_.say("error", fmt::format("the command did not stop before the lease on '{}' ran out; killing its "
                                  "process group",
                                  request_.name));
    kill(-group_, SIGKILL);
    killed_ = true;
  }
}

// The next step due: SIGTERM before a termination, SIGKILL after it.
CommandSupervision::Clock::time_point CommandSupervision::next_step(Clock::time_point now) const {
  auto deadline = lock_.local_deadline();
  if (!terminated_at_) return deadline - request_.grace;
  if (!killed_) return std::min(deadline - kill_margin_, *terminated_at_ + request_.grace);
  return now + std::chrono::hours(1);
}

void CommandSupervision::forward_signals() {
  signalfd_siginfo info{};
  while (read(signal_fd_.get(), &info, sizeof info) == sizeof info) {
    auto signal_number = static_cast<int>(info.ssi_signo);
    if (signal_number == SIGCHLD || signal_number == SIGCONT) continue;
    kill(-group_, signal_number);
    if (command_stopped_) kill(-group_, SIGCONT);  // a stopped command would not see it
  }
}

// Seen by the manager's renewal (Lock::release_requested), passed on once, by this loop's thread.
void CommandSupervision::pass_on_release_request() {
  if (release_request_passed_on_ || !lock_.release_requested()) return;
  release_request_passed_on_ = true;
  if (request_.ask_signal == 0) {
    out_.say("info", fmt::format("the holder of '{}' was asked to let go; no --ask-signal, so the command goes on",
                                 request_.name));
    return;
  }
  out_.say("info", fmt::format("the holder of '{}' was asked to let go; sending the command SIG{}", request_.name,
                               sigabbrev_np(request_.ask_signal)));
  kill(-group_, request_.ask_signal);
  if (command_stopped_) kill(-group_, SIGCONT);
}

void CommandSupervision::read_reports() {
  Report report;
  while (read(reports_.read, &report, sizeof report) == sizeof report) {
    if (report.kind == Report::exited) {
      command_status_ = report.value;
    } else if (report.kind == Report::exec_failed) {
      exec_error_ = report.value;
    } else if (report.kind == Report::continued) {
      command_stopped_ = false;
    } else {
      command_stopped_ = true;
      job_control_.follow_stop(
          group_, report.value, [this] { return lease_gone(); }, out_);
    }
  }
}

// The guard's zombie still holds the group's id. Nothing of the command may run on after the
// release: neither its group (the guard may have been killed alone) nor what left it.
void CommandSupervision::kill_what_is_left() {
  kill(-group_, SIGKILL);
  left_behind_ += kill_every_descendant(group_, [&](const std::vector<pid_t>& waiting) {
    out_.say("warning", fmt::format("the lock on '{}' stays held until {} process(es) of the command end that dblock "
                                    "cannot kill (pids {})",
                                    request_.name, waiting.size(), fmt::join(waiting, ", ")));
  });
}

void CommandSupervision::say_how_it_ended() {
  if (exec_error_) out_.say("error", exec_failure_message(request_.command.front(), *exec_error_));
  if (command_status_ && left_behind_ > 0)
    out_.say("warning", fmt::format("the command left {} process(es) running; they were killed before the lock on "
                                    "'{}' was released",
                                    left_behind_, request_.name));
  if (command_status_ || killed_) return;
  if (guard_end_->si_code == CLD_EXITED) {
    out_.say("error", fmt::format("the command under the lock '{}' could not be started (fork failed)", request_.name));
  } else if (Clock::now() < told_deadline_ - kill_margin_) {
    out_.say("error", fmt::format("the guard process of the command on '{}' was killed (signal {}); the command's "
                                  "process group and descendants were killed before the lock was released",
                                  request_.name, guard_end_->si_status));
  } else {
    out_.say("error", fmt::format("the command was killed at the lease's local deadline on '{}' (dblock was stopped "
                                  "or too slow to renew it)",
                                  request_.name));
  }
  terminated_at_ = Clock::now();
}

}  // namespace dblock::cli::detail
