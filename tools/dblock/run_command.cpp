#include "dblock/run_command.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>

#include <dblock/dblock.hpp>
#include <fmt/format.h>

#include "dblock/exit_codes.hpp"

extern char** environ;

namespace dblock::cli {

namespace {

sigset_t forwarded_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGCHLD);
  return set;
}

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kSoftware;
}

}  // namespace

void block_forwarded_signals() {
  auto set = forwarded_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int run_guarded(const std::shared_ptr<Store>& store, const RunRequest& request) {
  std::atomic<bool> lost{false};
  LockManager manager(store, ManagerOptions{.mode = request.mode,
                                            .default_ttl = request.ttl,
                                            .on_lost = [&](std::string_view, std::int64_t) { lost = true; }});
  LockOptions options{.shared = request.shared};
  std::optional<Lock> lock;
  if (request.wait.count() > 0) lock.emplace(manager.acquire(request.name, request.wait, options));
  else lock = manager.try_acquire(request.name, options);
  if (!lock) throw Timeout(fmt::format("lock '{}' is held by another owner", request.name));

  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env_storage;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (text.starts_with("DBLOCK_FENCING_TOKEN=") || text.starts_with("DBLOCK_LOCK_NAME=")) continue;
    env_storage.emplace_back(text);
  }
  env_storage.push_back(fmt::format("DBLOCK_FENCING_TOKEN={}", lock->token()));
  env_storage.push_back(fmt::format("DBLOCK_LOCK_NAME={}", request.name));
  std::vector<char*> envp;
  for (auto& entry : env_storage) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_storage(request.command);
  std::vector<char*> argv;
  for (auto& arg : args_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  sigset_t unblocked;
  sigemptyset(&unblocked);

  pid_t child = fork();
  if (child < 0) throw Error(ErrorCategory::database, fmt::format("fork failed: {}", std::strerror(errno)));
  if (child == 0) {
    pthread_sigmask(SIG_SETMASK, &unblocked, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    _exit(errno == ENOENT ? 127 : 126);
  }

  auto signals = forwarded_signals();
  bool terminated_for_loss = false;
  int status = 0;
  while (true) {
    timespec slice{0, 100'000'000};
    siginfo_t info{};
    int signal_number = sigtimedwait(&signals, &info, &slice);
    if (signal_number == SIGTERM || signal_number == SIGINT || signal_number == SIGHUP) kill(child, signal_number);
    pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (lost && !terminated_for_loss) {
      fmt::print(stderr, "dblock: lease on '{}' was lost while the command ran; sending it SIGTERM\n", request.name);
      kill(child, SIGTERM);
      terminated_for_loss = true;
    }
  }
  int child_status = exit_status_of(status);
  try {
    lock->release();
  } catch (const LockLost& e) {
    fmt::print(stderr, "dblock: {}\n", e.what());
    return kSoftware;
  }
  return terminated_for_loss ? kSoftware : child_status;
}

}  // namespace dblock::cli
