#include "dblock/run_command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include <dblock/dblock.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dblock/exit_codes.hpp"

extern char** environ;

namespace dblock::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Signals the wrapper forwards to the command's group.
constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP};
// Job control: the guard ignores these (it must be awake at the deadline, whatever the terminal
// does); the command gets the dispositions dblock itself was started with.
constexpr int kJobControl[] = {SIGTSTP, SIGTTIN, SIGTTOU};

// What the wrapper takes through its signalfd: the forwarded signals, SIGCHLD, and SIGCONT (which
// continues a stopped process even while blocked, and then stays pending: proof that it stopped).
sigset_t wrapper_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal_number : kForwarded) sigaddset(&set, signal_number);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGCONT);
  return set;
}

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kSoftware;
}

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
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw Error(ErrorCategory::database, fmt::format("pipe failed: {}", std::strerror(errno)));
    read = fds[0];
    write = fds[1];
  }
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
};

/// What exec needs, prepared before fork: after it, only async-signal-safe calls.
struct Exec {
  std::vector<std::string> env_storage, args_storage;
  std::vector<char*> envp, argv;
};

Exec prepare_exec(const RunRequest& request, std::int64_t token) {
  Exec exec;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (text.starts_with("DBLOCK_FENCING_TOKEN=") || text.starts_with("DBLOCK_LOCK_NAME=")) continue;
    exec.env_storage.emplace_back(text);
  }
  exec.env_storage.push_back(fmt::format("DBLOCK_FENCING_TOKEN={}", token));
  exec.env_storage.push_back(fmt::format("DBLOCK_LOCK_NAME={}", request.name));
  for (auto& entry : exec.env_storage) exec.envp.push_back(entry.data());
  exec.envp.push_back(nullptr);
  exec.args_storage = request.command;
  for (auto& arg : exec.args_storage) exec.argv.push_back(arg.data());
  exec.argv.push_back(nullptr);
  return exec;
}

/// SIGKILL comes this long before the local deadline, so that a late wake-up of this process
/// (a loaded host) does not carry the command past it.
std::chrono::milliseconds kill_margin(const RunRequest& request) {
  return std::min<std::chrono::milliseconds>(request.grace / 2, std::chrono::seconds(1));
}

std::int64_t steady_nanoseconds(Clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

/// CLOCK_MONOTONIC, which std::chrono::steady_clock reads on Linux; async-signal-safe.
std::int64_t monotonic_now() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

timespec timespec_of(std::int64_t nanoseconds) {
  return {static_cast<time_t>(nanoseconds / 1'000'000'000), static_cast<long>(nanoseconds % 1'000'000'000)};
}

/// One event of the command, from the guard to the wrapper (a pipe write below PIPE_BUF: atomic).
struct Report {
  enum Kind : int { exited, stopped, continued };
  int kind = exited;
  int value = 0;  // exited: the wait status; stopped: the stop signal
};

struct GuardSetup {
  pid_t wrapper = 0;
  std::int64_t deadline = 0, kill_margin = 0;  // CLOCK_MONOTONIC nanoseconds
  int terminal = -1;                           // hand this terminal to the group before the command starts
  struct sigaction job_control[std::size(kJobControl)] = {};  // the command's dispositions
};

void wake_guard(int) {}

/// The guard: leader of the command's process group, child of the wrapper. It ignores the
/// signals the wrapper forwards to the group and job control's stops, and reports the command's
/// stops, continuations and end on `reports`. The wrapper writes the lease's local deadline to
/// `life` whenever it moves; the guard kills the whole group (itself included) when that deadline
/// passes, when `life` reaches end of file (the wrapper died, perhaps by SIGKILL), and once the
/// command ended (what it left in its group ends with it). The command gets PR_SET_PDEATHSIG, so
/// it also dies if the guard is killed alone; the wrapper then kills the rest. Async-signal-safe
/// calls only (the wrapper has threads).
[[noreturn]] void guard(Exec& exec, Pipe& life, Pipe& reports, const GuardSetup& setup) {
  setpgid(0, 0);
  life.close_write();
  reports.close_read();
  fcntl(life.read, F_SETFL, fcntl(life.read, F_GETFL) | O_NONBLOCK);
  // A full pipe (a frozen wrapper) must not keep the guard from the deadline.
  fcntl(reports.write, F_SETFL, fcntl(reports.write, F_GETFL) | O_NONBLOCK);
  for (int signal_number : kForwarded) signal(signal_number, SIG_IGN);
  for (int signal_number : kJobControl) signal(signal_number, SIG_IGN);
  sigset_t child_signal;
  sigemptyset(&child_signal);
  sigaddset(&child_signal, SIGCHLD);
  sigprocmask(SIG_BLOCK, &child_signal, nullptr);  // taken only inside ppoll, below
  struct sigaction on_child {};
  on_child.sa_handler = wake_guard;
  sigemptyset(&on_child.sa_mask);
  sigaction(SIGCHLD, &on_child, nullptr);
  if (getppid() != setup.wrapper) kill(0, SIGKILL);  // the wrapper is already gone
  // The command reads the terminal as it would alone: its group is the foreground one.
  if (setup.terminal >= 0) tcsetpgrp(setup.terminal, getpid());
  pid_t guard_pid = getpid();
  pid_t command = fork();
  if (command < 0) _exit(kOsError);
  if (command == 0) {
    for (int signal_number : kForwarded) signal(signal_number, SIG_DFL);
    for (std::size_t i = 0; i < std::size(kJobControl); ++i) sigaction(kJobControl[i], &setup.job_control[i], nullptr);
    signal(SIGCHLD, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != guard_pid) _exit(kSoftware);
    execvpe(exec.argv[0], exec.argv.data(), exec.envp.data());
    _exit(errno == ENOENT ? 127 : 126);
  }
  sigset_t wake;  // the mask inside ppoll: SIGCHLD (the command stopped, continued or ended) wakes it
  sigprocmask(SIG_SETMASK, nullptr, &wake);
  sigdelset(&wake, SIGCHLD);
  auto tell = [&reports](int kind, int value) {
    Report report{kind, value};
    (void)!write(reports.write, &report, sizeof report);
  };
  std::int64_t deadline = setup.deadline;
  while (true) {
    auto left = deadline - setup.kill_margin - monotonic_now();
    if (left <= 0) break;  // the lease may be over: nothing of the group may go on
    auto timeout = timespec_of(left);
    pollfd fd{life.read, POLLIN, 0};
    int ready = ppoll(&fd, 1, &timeout, &wake);
    if (ready < 0 && errno != EINTR) break;
    if (ready > 0) {
      std::int64_t moved = 0;
      ssize_t got = 0;
      while ((got = read(life.read, &moved, sizeof moved)) == sizeof moved) deadline = moved;
      if (got == 0) break;  // end of file: the wrapper is gone
    }
    int status = 0;
    while (waitpid(command, &status, WNOHANG | WUNTRACED | WCONTINUED) == command) {
      if (WIFSTOPPED(status)) {
        tell(Report::stopped, WSTOPSIG(status));
      } else if (WIFCONTINUED(status)) {
        tell(Report::continued, 0);
      } else {
        tell(Report::exited, status);
        kill(0, SIGKILL);
      }
    }
  }
  kill(0, SIGKILL);
  _exit(kSoftware);
}

/// This process's children, from /proc (each process's parent is the fourth field of its stat).
std::vector<pid_t> children_of_this_process() {
  std::vector<pid_t> children;
  auto self = getpid();
  std::error_code error;
  for (std::filesystem::directory_iterator entries("/proc", error), end; !error && entries != end;
       entries.increment(error)) {
    const auto& entry = *entries;
    const auto name = entry.path().filename().string();
    pid_t pid = 0;
    if (std::from_chars(name.data(), name.data() + name.size(), pid).ec != std::errc{}) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    auto after_name = text.rfind(") ");  // the name in parentheses may hold anything
    if (after_name == std::string::npos || after_name + 4 >= text.size()) continue;
    pid_t parent = 0;
    const char* field = text.data() + after_name + 4;  // past ") S "
    std::from_chars(field, text.data() + text.size(), parent);
    if (parent == self) children.push_back(pid);
  }
  return children;
}

/// Reaps what ended among the processes reparented to this one (a child subreaper), telling
/// `killed` of each that died of SIGKILL. Returns the guard's end once it ended, without reaping
/// it: its zombie keeps the group's id from reuse, so kill(-group) cannot reach a stranger.
template <typename Killed>
std::optional<siginfo_t> reap_orphans(pid_t guard, const Killed& killed) {
  while (true) {
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return std::nullopt;
    if (info.si_pid == guard) return info;
    if (info.si_code == CLD_KILLED && info.si_status == SIGKILL) killed();
    waitpid(info.si_pid, nullptr, 0);
  }
}

/// SIGKILLs and reaps every descendant of this process until none is left. As a child subreaper,
/// this process inherits each orphan below it, also those that left the command's group or session
/// (setsid): it has no descendant once it has no child. Each pid killed is an unreaped child of
/// this process, so it cannot have been reused. One it may not kill (a setuid program's) is
/// waited for: the lock stays held, and renewed, until it ends; `slow` hears of it once.
/// Returns how many processes besides the guard died of SIGKILL: what the command left running.
template <typename Slow>
int kill_every_descendant(pid_t guard, const Slow& slow) {
  sigset_t child_signal;
  sigemptyset(&child_signal);
  sigaddset(&child_signal, SIGCHLD);
  int killed = 0;
  auto warn_at = Clock::now() + std::chrono::seconds(5);
  while (true) {
    auto children = children_of_this_process();
    for (pid_t child : children) kill(child, SIGKILL);
    if (Clock::now() >= warn_at) {
      slow(children);
      warn_at = Clock::time_point::max();
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      if (pid != guard && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ++killed;
      continue;
    }
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) return killed;  // ECHILD: nothing is left below this process
    auto pause = timespec_of(10'000'000);
    sigtimedwait(&child_signal, nullptr, &pause);
  }
}

/// The wrapper's side of job control, when it has a controlling terminal.
class JobControl {
 public:
  JobControl() : terminal_(::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)) {
    for (std::size_t i = 0; i < std::size(kJobControl); ++i) sigaction(kJobControl[i], nullptr, &command_dispositions_[i]);
    // Giving the terminal away and taking it back, and writing run's reports, from the background.
    if (terminal_) signal(SIGTTOU, SIG_IGN);
  }

  /// Copies what the guard needs: the command's dispositions, and the terminal when `run` is in
  /// its foreground (else the command starts in the background, as `run` itself).
  void prepare(GuardSetup& setup) const {
    for (std::size_t i = 0; i < std::size(kJobControl); ++i) setup.job_control[i] = command_dispositions_[i];
    setup.terminal = in_foreground() ? terminal_.get() : -1;
  }

  /// The command stopped: by Ctrl-Z, or reading or writing the terminal from the background. `run`
  /// stops with it (its own process group, as the command alone would stop its shell's job), giving
  /// the terminal back. Continued (`fg`, `bg`), it hands the terminal over again if it has it and
  /// continues the command, unless the lease ran out meanwhile (the guard kills the group at the
  /// deadline; a stopped wrapper renews nothing): then the group is killed, never continued.
  /// Without a controlling terminal the command stays stopped until someone continues it.
  template <typename LeaseGone, typename Say>
  void follow_stop(pid_t group, int stop_signal, const LeaseGone& lease_gone, const Say& say) {
    if (!terminal_) return;
    int fd = terminal_.get();
    bool terminal_stop = stop_signal == SIGTTIN || stop_signal == SIGTTOU;
    bool stopped = false;
    std::optional<termios> modes;
    if (!(terminal_stop && in_foreground())) {
      if (tcgetpgrp(fd) == group) {
        termios saved{};
        if (tcgetattr(fd, &saved) == 0) modes = saved;
        tcsetpgrp(fd, getpgrp());
      }
      take_pending_sigcont();
      // SIGTTOU is ignored here; a discarded stop (an orphaned process group) returns at once.
      kill(0, stop_signal == SIGTTIN ? SIGTTIN : SIGTSTP);
      stopped = take_pending_sigcont();
    }
    if (lease_gone()) {
      kill(-group, SIGKILL);
      return;
    }
    if (in_foreground()) {
      if (modes) tcsetattr(fd, TCSADRAIN, &*modes);
      tcsetpgrp(fd, group);
    } else if (terminal_stop && !stopped) {
      // Nobody can bring this run to the foreground: the terminal is as good as hung up for it.
      say("warning", "the command stopped for the terminal, but dblock runs without job control; sending it SIGHUP");
      kill(-group, SIGHUP);
    }
    kill(-group, SIGCONT);
  }

  /// Gives the terminal back when the command's group still has it.
  void restore(pid_t group) const {
    if (terminal_ && tcgetpgrp(terminal_.get()) == group) tcsetpgrp(terminal_.get(), getpgrp());
  }

 private:
  [[nodiscard]] bool in_foreground() const { return terminal_ && tcgetpgrp(terminal_.get()) == getpgrp(); }

  static bool take_pending_sigcont() {
    sigset_t cont;
    sigemptyset(&cont);
    sigaddset(&cont, SIGCONT);
    timespec now{};
    return sigtimedwait(&cont, nullptr, &now) == SIGCONT;
  }

  Fd terminal_;
  struct sigaction command_dispositions_[std::size(kJobControl)] = {};
};

}  // namespace

void block_forwarded_signals() {
  auto set = wrapper_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int run_guarded(const std::shared_ptr<Store>& store, const RunRequest& request) {
  Stderr plain(false);
  auto say = [out = request.out != nullptr ? request.out : &plain](std::string_view level, std::string_view message) {
    out->say(level, message);
  };
  // No on_lost callback: Lock::lost() turns true when it fires, and also at the deadline.
  LockManager manager(store, ManagerOptions{.mode = request.mode, .default_ttl = request.ttl});
  LockOptions options{.shared = request.shared, .permits = request.permits, .min_hold = request.min_hold};
  std::optional<Lock> lock;
  if (request.wait.count() > 0) lock.emplace(manager.acquire(request.name, request.wait, options));
  else lock = manager.try_acquire(request.name, options);
  if (!lock) throw Timeout(fmt::format("lock '{}' is held by another owner", request.name));
  // Claimed under the lock, recorded before it is released: a host granted the lock next finds the
  // outcome, never a 'running' record it would take for abandoned.
  std::optional<Occurrence> occurrence;
  if (request.occurrence) {
    occurrence.emplace(Occurrence::claim(store, *lock, *request.occurrence));
    if (!occurrence->claimed()) {
      auto& seen = occurrence->existing();
      say("info", fmt::format("occurrence {} of '{}' {}; not running it again", occurrence->key(), request.name,
                              seen ? fmt::format("was already claimed ({}, token {})", occurrence_status_name(seen->status),
                                                 seen->token)
                                   : std::string("could not be claimed (the lock's lease ended)")));
      return kTempFail;
    }
  }

  auto exec = prepare_exec(request, lock->token());
  Pipe life, reports;
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
  pid_t group = fork();
  if (group < 0) throw Error(ErrorCategory::database, fmt::format("fork failed: {}", std::strerror(errno)));
  if (group == 0) guard(exec, life, reports, setup);
  setpgid(group, group);  // also here: no signal may reach the group before it exists
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
  std::optional<siginfo_t> guard_end;
  int left_behind = 0;  // processes of the command killed after it ended
  auto read_reports = [&] {
    Report report;
    while (read(reports.read, &report, sizeof report) == sizeof report) {
      if (report.kind == Report::exited) {
        command_status = report.value;
      } else if (report.kind == Report::continued) {
        command_stopped = false;
      } else {
        command_stopped = true;
        job_control.follow_stop(group, report.value, lease_gone, say);
      }
    }
  };
  while (!guard_end) {
    auto now = Clock::now();
    auto deadline = lock->local_deadline();
    if (deadline != told_deadline && !lock->lost()) {  // a renewal moved it: tell the guard
      auto nanoseconds = steady_nanoseconds(deadline);
      (void)!write(life.write, &nanoseconds, sizeof nanoseconds);
      told_deadline = deadline;
    }
    bool lost = lock->lost();
    if (!terminated_at && (lost || now >= deadline - request.grace)) {
      say("warning", fmt::format("the lease on '{}' {} while the command ran; sending it SIGTERM", request.name,
                                 lost ? "was lost" : "could not be renewed and its deadline is near"));
      kill(-group, SIGTERM);
      if (command_stopped) kill(-group, SIGCONT);
      terminated_at = now;
    }
    auto kill_at = terminated_at ? std::min(deadline - kill_margin(request), *terminated_at + request.grace)
                                 : Clock::time_point::max();
    if (terminated_at && !killed && now >= kill_at) {
      say("error", fmt::format("the command did not stop before the lease on '{}' ran out; killing its process group",
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
  job_control.restore(group);
  // The guard's zombie still holds the group's id. Nothing of the command may run on after the
  // release: neither its group (the guard may have been killed alone) nor what left it.
  kill(-group, SIGKILL);
  left_behind += kill_every_descendant(group, [&](const std::vector<pid_t>& waiting) {
    say("warning", fmt::format("the lock on '{}' stays held until {} process(es) of the command end that dblock "
                               "cannot kill (pids {})",
                               request.name, waiting.size(), fmt::join(waiting, ", ")));
  });
  if (command_status && left_behind > 0)
    say("warning", fmt::format("the command left {} process(es) running; they were killed before the lock on '{}' "
                               "was released",
                               left_behind, request.name));
  if (!command_status && !killed) {
    if (guard_end->si_code == CLD_EXITED) {
      say("error", fmt::format("the command under the lock '{}' could not be started (fork failed)", request.name));
    } else if (Clock::now() < told_deadline - kill_margin(request)) {
      say("error", fmt::format("the guard process of the command on '{}' was killed (signal {}); the command's process "
                               "group and descendants were killed before the lock was released",
                               request.name, guard_end->si_status));
    } else {
      say("error", fmt::format("the command was killed at the lease's local deadline on '{}' (dblock was stopped or "
                               "too slow to renew it)",
                               request.name));
    }
    terminated_at = Clock::now();
  }
  int result = command_status ? exit_status_of(*command_status) : 128 + SIGKILL;
  if (occurrence) {
    try {
      occurrence->finish(terminated_at ? kSoftware : result);
    } catch (const Error& e) {
      say("error", fmt::format("could not record how occurrence {} of '{}' ended: {}", occurrence->key(), request.name,
                               e.what()));
    }
  }
  try {
    lock->release();
  } catch (const LockLost& e) {
    say("error", e.what());
    return kSoftware;
  }
  return terminated_at ? kSoftware : result;
}

}  // namespace dblock::cli
