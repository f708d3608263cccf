#pragma once
// `run`'s processes: the command's exec prepared before fork, the guard that leads the command's
// process group, and the wrapper's reaping and killing of every descendant as a child subreaper.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dblock/run_command.hpp"

namespace dblock::cli::detail {

// Signals the wrapper forwards to the command's group.
inline constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP};
// Job control: the guard ignores these (it must be awake at the deadline, whatever the terminal
// does); the command gets the dispositions dblock itself was started with.
inline constexpr int kJobControl[] = {SIGTSTP, SIGTTIN, SIGTTOU};

/// What the wrapper takes through its signalfd: the forwarded signals, SIGCHLD, and SIGCONT (which
/// continues a stopped process even while blocked, and then stays pending: proof that it stopped).
sigset_t wrapper_signals();

/// A shell's exit status for a wait status: 128 + the signal for a command killed by one.
int exit_status_of(int status);

class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_;
};

/// Both ends close on exec: the command never holds them.
struct Pipe {
  int read = -1, write = -1;
  Pipe();
  ~Pipe() {
    close_read();
    close_write();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void close_read() noexcept {
    if (read >= 0) ::close(read);
    read = -1;
  }
  void close_write() noexcept {
    if (write >= 0) ::close(write);
    write = -1;
  }
  /// Writes `size` bytes (at most PIPE_BUF: one atomic write) to the write end. When the reader is
  /// gone this returns false instead of raising SIGPIPE, whose default action would kill the
  /// writer: the wrapper before it reaps the guard and releases the lock, or the guard before it
  /// kills what is left of the command's group. Async-signal-safe: the guard calls it too.
  bool send(const void* data, std::size_t size) const noexcept;
};

/// What exec needs, prepared before fork: after it, only async-signal-safe calls.
struct Exec {
  std::vector<std::string> env_storage, args_storage;
  std::vector<char*> envp, argv;
};

/// What the command is told of its grant: with the lock's name, the arguments of the fence a
/// transaction of its own begins with (doc/sql-contract.md): `fence(name, token)` for an exclusive
/// lock, `fence_member(name, owner, kind, token)` for a permit or a reader.
struct CommandGrant {
  std::int64_t token = 0;
  std::string owner;      // the holder's owner id, as the lock table (a member: the holders table) has it
  std::string_view kind;  // "exclusive", "permit" or "shared"
};

/// The command line, and this environment with the grant in it: DBLOCK_LOCK_NAME,
/// DBLOCK_FENCING_TOKEN, DBLOCK_LOCK_OWNER and DBLOCK_LOCK_KIND (inherited values of those replaced).
Exec prepare_exec(const RunRequest& request, const CommandGrant& grant);

/// Why the command could not be started, for the wrapper to print: `error` is the errno of its
/// exec (`run` exits 127 for ENOENT, 126 for any other).
[[nodiscard]] std::string exec_failure_message(const std::string& command, int error);

/// A steady_clock instant as CLOCK_MONOTONIC nanoseconds, the guard's clock (the same on Linux).
std::int64_t steady_nanoseconds(std::chrono::steady_clock::time_point at);

/// Plain arithmetic: async-signal-safe, for the guard.
timespec timespec_of(std::int64_t nanoseconds);

/// One event of the command, from the guard to the wrapper (a pipe write below PIPE_BUF: atomic).
/// A failed exec is written by the command itself, before it exits: so before the guard's report
/// of that exit.
struct Report {
  enum Kind : int { exited, stopped, continued, exec_failed };
  int kind = exited;
  int value = 0;  // exited: the wait status; stopped: the stop signal; exec_failed: the exec's errno
};

/// The descriptors this process has open now (/proc/self/fd): taken at start, before dblock opens
/// any of its own, it is what the command may inherit.
[[nodiscard]] std::vector<int> open_descriptors();
/// Marks close-on-exec every descriptor above stderr not in `inherited`: the command gets what
/// dblock itself was given (a socket passed on, a redirected fd 3), never dblock's own connections
/// (MariaDB's Connector/C opens its sockets without close-on-exec).
void close_on_exec_all_but(const std::vector<int>& inherited);

struct GuardSetup {
  pid_t wrapper = 0;
  std::int64_t deadline = 0, kill_margin = 0;  // CLOCK_MONOTONIC nanoseconds
  int terminal = -1;                           // hand this terminal to the group before the command starts
  int ask_signal = 0;  // also sent to the group (RunRequest::ask_signal): held back and handed over like kForwarded
  struct sigaction job_control[std::size(kJobControl)] = {};  // the command's dispositions
};

/// Call in the child of fork: it becomes the guard, leader of the command's process group, which
/// starts the command and never returns. It keeps the signals the wrapper forwards to the group
/// (and the setup's ask_signal) blocked (one the group got before the command existed is handed to the command through
/// `handoff`, both ends of which the wrapper closes), ignores job control's stops, and reports the
/// command's stops, continuations and end on `reports`.
/// The wrapper writes the lease's local deadline to `life` whenever it moves; the guard kills the
/// whole group (itself included) when that deadline passes, when `life` reaches end of file (the
/// wrapper died, perhaps by SIGKILL), and once the command ended (what it left in its group ends
/// with it). The command gets PR_SET_PDEATHSIG, so it also dies if the guard is killed alone; the
/// wrapper then kills the rest. Async-signal-safe calls only (the wrapper has threads).
[[noreturn]] void become_guard(Exec& exec, Pipe& life, Pipe& reports, Pipe& handoff, const GuardSetup& setup);

/// Reaps what ended among the processes reparented to this one (a child subreaper), calling
/// `killed` for each that died of SIGKILL. Returns the guard's end once it ended, without reaping
/// it: its zombie keeps the group's id from reuse, so kill(-group) cannot reach a stranger.
std::optional<siginfo_t> reap_orphans(pid_t guard, const std::function<void()>& killed);

/// SIGKILLs and reaps every descendant of this process until none is left. As a child subreaper,
/// this process inherits each orphan below it, also those that left the command's group or session
/// (setsid): it has no descendant once it has no child. Each pid killed is an unreaped child of
/// this process, so it cannot have been reused. One it may not kill (a setuid program's) is
/// waited for: the lock stays held, and renewed, until it ends; `slow` hears of it once.
/// Returns how many processes besides the guard died of SIGKILL: what the command left running.
int kill_every_descendant(pid_t guard, const std::function<void(const std::vector<pid_t>& waiting)>& slow);

}  // namespace dblock::cli::detail
