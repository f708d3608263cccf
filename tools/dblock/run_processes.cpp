#include "dblock/run_processes.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "dblock/exit_codes.hpp"

extern char** environ;

namespace dblock::cli::detail {

namespace {

using Clock = std::chrono::steady_clock;

/// CLOCK_MONOTONIC, which std::chrono::steady_clock reads on Linux; async-signal-safe.
std::int64_t monotonic_now() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

void wake_guard(int) {}

/// This process's children, from /proc (each process's parent is the fourth field of its stat).
/// Up to 4 KiB of a file, empty when it cannot be read (a /proc entry of a process that ended).
std::string read_small_file(const char* path) {
  char buffer[4096];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  auto got = read(fd, buffer, sizeof buffer);
  close(fd);
  return got > 0 ? std::string(buffer, static_cast<std::size_t>(got)) : std::string();
}

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
    // read(2), not a stream: a process that ends meanwhile fails the read with ESRCH, which
    // libstdc++'s filebuf reports by throwing.
    std::string text = read_small_file((entry.path() / "stat").c_str());
    auto after_name = text.rfind(") ");  // the name in parentheses may hold anything
    if (after_name == std::string::npos || after_name + 4 >= text.size()) continue;
    pid_t parent = 0;
    const char* field = text.data() + after_name + 4;  // past ") S "
    std::from_chars(field, text.data() + text.size(), parent);
    if (parent == self) children.push_back(pid);
  }
  return children;
}

/// The signals the wrapper sends the group: the forwarded ones and the ask signal (0: none).
std::array<int, std::size(kForwarded) + 1> group_signals(const GuardSetup& setup) {
  std::array<int, std::size(kForwarded) + 1> signals{};
  std::ranges::copy(kForwarded, signals.begin());
  signals.back() = setup.ask_signal;
  return signals;
}

/// The guard's side: which of the group's signals are pending here, as a bit per group_signals
/// entry. Read after the fork, it holds every one sent to the group before it (the command missed
/// those) and maybe some sent since (the command has those pending too).
void hand_over_signals_sent_before_fork(const Pipe& handoff, const GuardSetup& setup) {
  sigset_t pending;
  sigpending(&pending);
  std::uint32_t sent = 0;
  auto signals = group_signals(setup);
  for (std::size_t i = 0; i < signals.size(); ++i)
    if (signals[i] != 0 && sigismember(&pending, signals[i]) == 1) sent |= 1U << i;
  handoff.send(&sent, sizeof sent);
}

/// The command's side, before it unblocks anything: a signal pending at the guard but not here was
/// sent before this process existed, so it is raised here (blocked: it waits for the unblock). The
/// guard read its pending set first, so one sent to both since is pending here and not raised twice.
void receive_signals_sent_before_fork(const Pipe& handoff, const GuardSetup& setup) {
  std::uint32_t sent = 0;
  while (read(handoff.read, &sent, sizeof sent) < 0 && errno == EINTR) {
  }
  sigset_t pending;
  sigpending(&pending);
  auto signals = group_signals(setup);
  for (std::size_t i = 0; i < signals.size(); ++i)
    if ((sent >> i & 1U) != 0 && sigismember(&pending, signals[i]) != 1) kill(getpid(), signals[i]);
}

}  // namespace

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

Pipe::Pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    throw Error(ErrorCategory::database, fmt::format("pipe failed: {}", std::strerror(errno)));
  read = fds[0];
  write = fds[1];
}

bool Pipe::send(const void* data, std::size_t size) const noexcept {
  // libpq's way: SIGPIPE blocked in this thread for the write, and the one it raised (it is
  // directed at the writing thread) taken back before the mask is restored. One that was pending
  // before is left for its owner.
  sigset_t broken_pipe, previous, pending;
  sigemptyset(&broken_pipe);
  sigaddset(&broken_pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &broken_pipe, &previous);
  sigpending(&pending);
  bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  auto written = ::write(write, data, size);
  bool broken = written < 0 && errno == EPIPE;
  if (broken && !was_pending) {
    timespec now{};
    while (sigtimedwait(&broken_pipe, nullptr, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return written == static_cast<ssize_t>(size);
}

Exec prepare_exec(const RunRequest& request, const CommandGrant& grant) {
  Exec exec;
  constexpr std::string_view kOurs[] = {
      "DBLOCK_FENCING_TOKEN=", "DBLOCK_LOCK_NAME=", "DBLOCK_LOCK_OWNER=", "DBLOCK_LOCK_KIND="};
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (std::ranges::any_of(kOurs, [&](std::string_view ours) { return text.starts_with(ours); })) continue;
    exec.env_storage.emplace_back(text);
  }
  exec.env_storage.push_back(fmt::format("DBLOCK_FENCING_TOKEN={}", grant.token));
  exec.env_storage.push_back(fmt::format("DBLOCK_LOCK_NAME={}", request.name));
  exec.env_storage.push_back(fmt::format("DBLOCK_LOCK_OWNER={}", grant.owner));
  exec.env_storage.push_back(fmt::format("DBLOCK_LOCK_KIND={}", grant.kind));
  for (auto& entry : exec.env_storage) exec.envp.push_back(entry.data());
  exec.envp.push_back(nullptr);
  exec.args_storage = request.command;
  for (auto& arg : exec.args_storage) exec.argv.push_back(arg.data());
  exec.argv.push_back(nullptr);
  return exec;
}

std::string exec_failure_message(const std::string& command, int error) {
  std::string why;
  if (error == ENOENT && command.find('/') == std::string::npos) {
    why = "command not found in PATH";
  } else if (error == ENOENT) {
    std::error_code ignored;  // execve's ENOENT for a file that exists: its #! interpreter is missing
    why = std::filesystem::exists(command, ignored) ? "its interpreter (the #! line) was not found" : "no such file";
  } else if (error == EACCES) {
    why = "not executable: permission denied (no execute right, or not a regular file)";
  } else {
    why = fmt::format("cannot be executed: {}", std::strerror(error));
  }
  return fmt::format("cannot run '{}': {} (exit {})", command, why, error == ENOENT ? 127 : 126);
}

std::int64_t steady_nanoseconds(Clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

timespec timespec_of(std::int64_t nanoseconds) {
  return {static_cast<time_t>(nanoseconds / 1'000'000'000), static_cast<long>(nanoseconds % 1'000'000'000)};
}

std::vector<int> open_descriptors() {
  std::vector<int> descriptors;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    int fd = -1;
    auto name = entry.path().filename().string();
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec == std::errc()) descriptors.push_back(fd);
  }
  // The listing's own directory is among them, closed by now.
  std::erase_if(descriptors, [](int fd) { return fcntl(fd, F_GETFD) == -1; });
  return descriptors;
}

void close_on_exec_all_but(const std::vector<int>& inherited) {
  for (int fd : open_descriptors())
    if (fd > STDERR_FILENO && std::ranges::find(inherited, fd) == inherited.end())
      fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
}

namespace {

/// The guard's child: the command, with the dispositions and signal mask it would have alone, and
/// the signals its group got before it existed. Async-signal-safe calls only.
[[noreturn]] void become_command(Exec& exec, Pipe& reports, Pipe& handoff, const GuardSetup& setup, pid_t guard_pid) {
  handoff.close_write();
  receive_signals_sent_before_fork(handoff, setup);
  for (int signal_number : kForwarded) signal(signal_number, SIG_DFL);
  for (std::size_t i = 0; i < std::size(kJobControl); ++i) sigaction(kJobControl[i], &setup.job_control[i], nullptr);
  signal(SIGCHLD, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != guard_pid) _exit(kSoftware);
  execvpe(exec.argv[0], exec.argv.data(), exec.envp.data());
  // Exit as a shell would (127: not found, 126: not executable); the wrapper says which, and why.
  int error = errno;
  Report failed{Report::exec_failed, error};
  reports.send(&failed, sizeof failed);
  _exit(error == ENOENT ? 127 : 126);
}

}  // namespace

void become_guard(Exec& exec, Pipe& life, Pipe& reports, Pipe& handoff, const GuardSetup& setup) {
  setpgid(0, 0);
  life.close_write();
  reports.close_read();
  fcntl(life.read, F_SETFL, fcntl(life.read, F_GETFL) | O_NONBLOCK);
  // A full pipe (a frozen wrapper) must not keep the guard from the deadline.
  fcntl(reports.write, F_SETFL, fcntl(reports.write, F_GETFL) | O_NONBLOCK);
  // The forwarded signals stay blocked here for good, never ignored: ignoring one discards it, and
  // one sent to the group before the command was forked is handed to the command below.
  sigset_t held_back;
  sigemptyset(&held_back);
  for (int signal_number : kForwarded) sigaddset(&held_back, signal_number);
  if (setup.ask_signal != 0) sigaddset(&held_back, setup.ask_signal);
  sigaddset(&held_back, SIGCHLD);  // taken only inside ppoll, below
  sigprocmask(SIG_BLOCK, &held_back, nullptr);
  for (int signal_number : kJobControl) signal(signal_number, SIG_IGN);
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
  if (command == 0) become_command(exec, reports, handoff, setup, guard_pid);
  handoff.close_read();
  hand_over_signals_sent_before_fork(handoff, setup);
  handoff.close_write();
  sigset_t wake;  // the mask inside ppoll: SIGCHLD (the command stopped, continued or ended) wakes it
  sigprocmask(SIG_SETMASK, nullptr, &wake);
  sigdelset(&wake, SIGCHLD);
  auto tell = [&reports](int kind, int value) {
    Report report{kind, value};
    reports.send(&report, sizeof report);  // a wrapper that is gone reads none
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

std::optional<siginfo_t> reap_orphans(pid_t guard, const std::function<void()>& killed) {
  while (true) {
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return std::nullopt;
    if (info.si_pid == guard) return info;
    if (info.si_code == CLD_KILLED && info.si_status == SIGKILL) killed();
    waitpid(info.si_pid, nullptr, 0);
  }
}

int kill_every_descendant(pid_t guard, const std::function<void(const std::vector<pid_t>& waiting)>& slow) {
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

}  // namespace dblock::cli::detail
