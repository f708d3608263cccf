#include "support/cli_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include <gtest/gtest.h>

extern char** environ;

namespace dblock::test {
namespace {

using Clock = std::chrono::steady_clock;

/// A new empty file under /tmp, its path.
std::string temporary_file(const char* what) {
  std::string pattern = std::string("/tmp/dblock-") + what + ".XXXXXX";
  int fd = ::mkstemp(pattern.data());
  if (fd < 0) return {};
  ::close(fd);
  return pattern;
}

/// This process's environment with `changes` applied ("NAME=value" sets, a bare "NAME" unsets).
std::vector<std::string> environment_with(const std::vector<std::string>& changes) {
  std::vector<std::string> entries;
  for (char** entry = environ; *entry != nullptr; ++entry) entries.emplace_back(*entry);
  for (const auto& change : changes) {
    auto name = change.substr(0, change.find('='));
    std::erase_if(entries, [&](const std::string& entry) { return entry.substr(0, entry.find('=')) == name; });
    if (change.find('=') != std::string::npos) entries.push_back(change);
  }
  return entries;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (auto& text : strings) result.push_back(text.data());
  result.push_back(nullptr);
  return result;
}

CommandOutcome outcome_of(int status, std::string output) {
  if (WIFSIGNALED(status)) return {128 + WTERMSIG(status), std::move(output), WTERMSIG(status)};
  return {WEXITSTATUS(status), std::move(output), 0};
}

}  // namespace

ChildProcess::ChildProcess(std::vector<std::string> argv, ProgramOptions options)
    : output_path_(std::move(options.output)), new_session_(options.new_session) {
  for (const auto& arg : argv) command_ += (command_.empty() ? "" : " ") + arg;
  if (output_path_.empty()) {
    output_path_ = temporary_file("output");
    owns_output_ = true;
  }
  if (options.input) {
    input_path_ = temporary_file("input");
    std::ofstream(input_path_, std::ios::binary) << *options.input;
  }
  auto environment = environment_with(options.env);
  auto envp = pointers(environment);
  auto args = pointers(argv);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!input_path_.empty()) posix_spawn_file_actions_addopen(&actions, 0, input_path_.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, output_path_.c_str(),
                                   O_WRONLY | O_CREAT | (options.append ? O_APPEND : O_TRUNC), 0600);
  if (options.errors.empty())
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  else
    posix_spawn_file_actions_addopen(&actions, 2, options.errors.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  short flags = POSIX_SPAWN_SETSIGMASK;
  if (new_session_) flags |= POSIX_SPAWN_SETSID;
  posix_spawnattr_setflags(&attributes, flags);
  pid_t pid = -1;
  // A bare name is looked up in PATH, as a shell would; a path is run as it is.
  auto* spawn = !argv.empty() && argv[0].find('/') == std::string::npos ? posix_spawnp : posix_spawn;
  int error = argv.empty() ? EINVAL : spawn(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    outcome_ = CommandOutcome{127, "cannot start " + command_ + ": " + std::strerror(error) + "\n", 0};
    return;
  }
  pid_ = pid;
  // glibc 2.36's <sys/pidfd.h> declares pidfd_open without C linkage: the system call itself.
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));  // -1 without pidfds: then waitpid is polled
}

ChildProcess::~ChildProcess() {
  kill_and_reap();
  if (pidfd_ >= 0) ::close(pidfd_);
  if (owns_output_) std::remove(output_path_.c_str());
  if (!input_path_.empty()) std::remove(input_path_.c_str());
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : command_(std::move(other.command_)),
      output_path_(std::move(other.output_path_)),
      owns_output_(std::exchange(other.owns_output_, false)),
      input_path_(std::exchange(other.input_path_, {})),
      new_session_(other.new_session_),
      pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      outcome_(std::exchange(other.outcome_, CommandOutcome{})) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    ChildProcess old(std::move(*this));  // killed and cleaned up as it goes
    command_ = std::move(other.command_);
    output_path_ = std::move(other.output_path_);
    owns_output_ = std::exchange(other.owns_output_, false);
    input_path_ = std::exchange(other.input_path_, {});
    new_session_ = other.new_session_;
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    outcome_ = std::exchange(other.outcome_, CommandOutcome{});
  }
  return *this;
}

std::string ChildProcess::output() const {
  if (outcome_ && pid_ < 0) return outcome_->output;  // never started: the reason
  return read_text(output_path_);
}

void ChildProcess::signal(int signal) const {
  if (pid_ > 0 && !outcome_) ::kill(pid_, signal);
}

void ChildProcess::signal_group(int signal) const {
  if (pid_ > 0 && !outcome_) ::kill(-pid_, signal);
}

std::optional<CommandOutcome> ChildProcess::wait_for(std::chrono::milliseconds limit) {
  if (outcome_) return outcome_;
  auto deadline = Clock::now() + limit;
  for (;;) {
    int status = 0;
    pid_t reaped = ::waitpid(pid_, &status, WNOHANG);
    if (reaped == pid_) {
      outcome_ = outcome_of(status, read_text(output_path_));
      return outcome_;
    }
    if (reaped < 0 && errno != EINTR) {  // not our child any more: nothing to wait for
      outcome_ = CommandOutcome{-1, read_text(output_path_), 0};
      return outcome_;
    }
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) return std::nullopt;
    // The pidfd turns readable when the program ends; without one, waitpid is asked every 2 ms.
    auto wait_ms = static_cast<int>(std::min<std::chrono::milliseconds::rep>(left.count(), pidfd_ >= 0 ? 1000 : 2));
    pollfd fd{pidfd_, POLLIN, 0};
    ::poll(pidfd_ >= 0 ? &fd : nullptr, pidfd_ >= 0 ? 1 : 0, wait_ms);
  }
}

CommandOutcome ChildProcess::finish(std::chrono::milliseconds limit) {
  if (auto ended = wait_for(limit)) return *ended;
  ADD_FAILURE() << "`" << command_ << "` did not end within " << limit.count() << " ms: killed; its output:\n"
                << read_text(output_path_);
  kill_and_reap();
  return *outcome_;
}

void ChildProcess::kill_and_reap() noexcept {
  if (pid_ <= 0 || outcome_) return;
  pid_t target = new_session_ ? -pid_ : pid_;
  ::kill(target, SIGCONT);  // a stopped program dies of SIGKILL too, but a stopped group's others wait
  ::kill(target, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  try {
    outcome_ = outcome_of(status, read_text(output_path_));
  } catch (...) {
    outcome_ = CommandOutcome{};
  }
}

CommandOutcome run_command(std::vector<std::string> argv, ProgramOptions options, std::chrono::milliseconds limit) {
  return ChildProcess(std::move(argv), std::move(options)).finish(limit);
}

}  // namespace dblock::test
