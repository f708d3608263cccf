#pragma once
// `run`'s wrapper while its command runs: the guard forked, the deadline told to it, signals
// forwarded to the command's group, SIGTERM and SIGKILL when the lease ends, and nothing of the
// command left alive before the lock is released.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>

#include <dblock/lock.hpp>

#include "dblock/logging.hpp"
#include "dblock/run_command.hpp"
#include "dblock/run_processes.hpp"
#include "dblock/run_terminal.hpp"

namespace dblock::cli::detail {

/// Supervises one command under `lock`. SIGTERM goes to its group when the lease is lost or its
/// local deadline is `grace` away; SIGKILL at the deadline minus the kill margin (or `grace` after
/// a certain loss, if that is sooner). Nothing here waits on the database: the manager's timer
/// marks the lock lost at the deadline whatever its renewal is doing, and the deadline is read
/// afresh on every turn. Not thread-safe: one per `run`, on the thread that holds the lock.
class CommandSupervision {
 public:
  using Clock = std::chrono::steady_clock;

  /// @throws Error when the signalfd cannot be made.
  CommandSupervision(Lock& lock, const RunRequest& request, const Stderr& out);

  /// Starts the command under its guard and returns once the guard ended and every descendant of
  /// this process is killed and reaped. @throws Error when fork fails.
  void run(Exec& exec);

  /// The command's exit status (128 + SIGKILL when it never reported an end).
  [[nodiscard]] int result() const;
  /// The command was told to stop (its lease lost or ending), or ended without reporting an end.
  [[nodiscard]] bool cut_short() const { return terminated_at_.has_value(); }

 private:
  void start_guard(Exec& exec);
  void tell_guard_a_moved_deadline();
  void stop_when_due(Clock::time_point now);
  [[nodiscard]] Clock::time_point next_step(Clock::time_point now) const;
  void forward_signals();
  void pass_on_release_request();
  void read_reports();
  void kill_what_is_left();
  void say_how_it_ended();
  [[nodiscard]] bool lease_gone() const;

  Lock& lock_;
  const RunRequest& request_;
  const Stderr& out_;
  const std::chrono::milliseconds kill_margin_;
  Pipe life_, reports_;
  Pipe handoff_;  // the guard's to its command: the forwarded signals the group got before the command
  Fd signal_fd_;
  JobControl job_control_;
  pid_t group_ = 0;
  Clock::time_point told_deadline_;
  std::optional<Clock::time_point> terminated_at_;
  bool killed_ = false;
  bool command_stopped_ = false;
  bool release_request_passed_on_ = false;
  std::optional<int> command_status_;
  std::optional<int> exec_error_;  // the command could not be started: its exec's errno
  std::optional<siginfo_t> guard_end_;
  int left_behind_ = 0;  // processes of the command killed after it ended
};

}  // namespace dblock::cli::detail
