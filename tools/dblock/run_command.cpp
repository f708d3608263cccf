#include "dblock/run_command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <dblock/dblock.hpp>
#include <fmt/format.h>

#include "dblock/exit_codes.hpp"

extern char** environ;

namespace dblock::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Signals the wrapper receives with sigtimedwait: those forwarded to the command, and SIGCHLD.
constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP};

sigset_t wrapper_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal_number : kForwarded) sigaddset(&set, signal_number);
  sigaddset(&set, SIGCHLD);
  return set;
}

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kSoftware;
}

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

/// The guard: leader of the command's process group, child of the wrapper. It ignores the
/// signals the wrapper forwards to the group and reports the command's wait status on `status`.
/// The wrapper writes the lease's local deadline to `life` whenever it moves; the guard kills
/// the whole group (itself included) when that deadline passes, or when `life` reaches end of
/// file: the wrapper died, perhaps by SIGKILL, or it was stopped (SIGSTOP, a frozen host
/// process) and nobody renews the lease. The command gets PR_SET_PDEATHSIG, so it also dies if
/// the guard is killed alone. Async-signal-safe calls only (the wrapper has threads).
[[noreturn]] void guard(Exec& exec, Pipe& life, Pipe& status, pid_t wrapper, std::int64_t deadline,
                        std::int64_t kill_margin) {
  setpgid(0, 0);
  life.close_write();
  status.close_read();
  fcntl(life.read, F_SETFL, fcntl(life.read, F_GETFL) | O_NONBLOCK);
  for (int signal_number : kForwarded) signal(signal_number, SIG_IGN);
  if (getppid() != wrapper) kill(0, SIGKILL);  // the wrapper is already gone
  pid_t guard_pid = getpid();
  pid_t command = fork();
  if (command < 0) _exit(kOsError);
  if (command == 0) {
    for (int signal_number : kForwarded) signal(signal_number, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != guard_pid) _exit(kSoftware);
    execvpe(exec.argv[0], exec.argv.data(), exec.envp.data());
    _exit(errno == ENOENT ? 127 : 126);
  }
  int command_fd = static_cast<int>(syscall(SYS_pidfd_open, command, 0));
  while (true) {
    auto left_ms = (deadline - kill_margin - monotonic_now()) / 1'000'000;
    if (left_ms <= 0) break;  // the lease may be over: nothing of the group may go on
    // Without a pidfd (old kernel), look at the command every 50 ms.
    int timeout = static_cast<int>(std::min<std::int64_t>(left_ms, command_fd >= 0 ? 60'000 : 50));
    pollfd fds[2] = {{life.read, POLLIN, 0}, {command_fd, POLLIN, 0}};
    int ready = poll(fds, command_fd >= 0 ? 2 : 1, timeout);
    if (ready < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) {
      std::int64_t moved = 0;
      ssize_t got = 0;
      while ((got = read(life.read, &moved, sizeof moved)) == sizeof moved) deadline = moved;
      if (got == 0) break;  // end of file: the wrapper is gone
    }
    int wait_status = 0;
    if (waitpid(command, &wait_status, WNOHANG) == command) {
      (void)!write(status.write, &wait_status, sizeof wait_status);
      _exit(0);
    }
  }
  kill(0, SIGKILL);
  _exit(kSoftware);
}

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
  LockOptions options{.shared = request.shared, .permits = request.permits};
  std::optional<Lock> lock;
  if (request.wait.count() > 0) lock.emplace(manager.acquire(request.name, request.wait, options));
  else lock = manager.try_acquire(request.name, options);
  if (!lock) throw Timeout(fmt::format("lock '{}' is held by another owner", request.name));

  auto exec = prepare_exec(request, lock->token());
  Pipe life, status;
  pid_t wrapper = getpid();
  pid_t group = fork();
  if (group < 0) throw Error(ErrorCategory::database, fmt::format("fork failed: {}", std::strerror(errno)));
  auto told_deadline = lock->local_deadline();
  if (group == 0)
    guard(exec, life, status, wrapper, steady_nanoseconds(told_deadline),
          std::chrono::duration_cast<std::chrono::nanoseconds>(kill_margin(request)).count());
  setpgid(group, group);  // also here: no signal may reach the group before it exists
  life.close_read();
  status.close_write();

  // SIGTERM when the lease is lost or its local deadline is `grace` away; SIGKILL of the whole
  // group at the deadline (or `grace` after a certain loss, if that is sooner). Nothing here
  // waits on the database: the manager's timer marks the lock lost at the deadline whatever
  // its renewal is doing, and the deadline is read afresh on every turn.
  auto signals = wrapper_signals();
  constexpr auto kPoll = std::chrono::milliseconds(100);
  std::optional<Clock::time_point> terminated_at;
  bool killed = false;
  int guard_status = 0;
  while (true) {
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
    timespec timeout{static_cast<time_t>(slice.count() / 1'000'000'000), static_cast<long>(slice.count() % 1'000'000'000)};
    siginfo_t info{};
    int signal_number = sigtimedwait(&signals, &info, &timeout);
    if (signal_number > 0 && signal_number != SIGCHLD) kill(-group, signal_number);
    if (waitpid(group, &guard_status, WNOHANG) == group) break;
  }
  int command_status = 0;
  bool reported = read(status.read, &command_status, sizeof command_status) == sizeof command_status;
  if (!reported && !killed) {
    say("error", fmt::format("the command was killed at the lease's local deadline on '{}' (dblock was stopped or too "
                             "slow to renew it)",
                             request.name));
    terminated_at = Clock::now();
  }
  int result = reported ? exit_status_of(command_status) : 128 + SIGKILL;
  try {
    lock->release();
  } catch (const LockLost& e) {
    say("error", e.what());
    return kSoftware;
  }
  return terminated_at ? kSoftware : result;
}

}  // namespace dblock::cli
