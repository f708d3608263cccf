#pragma once
// The one way a test starts another program (the dblock CLI, a sidecar, a shell): run it to its end
// within a bound (run_command), or start it in the background and keep a handle (ChildProcess). Its
// stdout and stderr go to one file, readable while it runs; its exit is waited for on a pidfd, never
// by sleeping. A program that outlives its bound is killed and the test fails, naming it.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "support/processes.hpp"

namespace dblock::test {

using namespace std::chrono_literals;

/// How a program is started. The child gets stdin, stdout and stderr only (every other descriptor
/// is closed), no blocked signal, and this process's environment with `env` applied.
struct ProgramOptions {
  /// "NAME=value" sets NAME for the child (replacing this process's value); a bare "NAME" unsets it.
  std::vector<std::string> env;
  /// The child's stdin: this text (through a file); nullopt: this process's stdin.
  std::optional<std::string> input;
  /// The child's working directory; empty: this process's.
  std::string cwd;
  /// The file stdout and stderr go to; empty: a temporary file of the handle's own, removed with it.
  std::string output;
  /// Append to `output` instead of truncating it.
  bool append = false;
  /// The file stderr goes to instead (e.g. "/dev/null" when only stdout is the result); empty: `output`.
  std::string errors;
  /// A session (and process group) of its own, as setsid: signal_group() reaches what it started.
  bool new_session = false;
};

/// How long run_command() and ChildProcess::finish() let a program run before they kill it and fail.
inline constexpr std::chrono::milliseconds kCommandLimit = 60s;

/// A program started in the background. Move-only; destroyed while the program runs, it kills it
/// with SIGKILL (its group too, with new_session) and reaps it.
class ChildProcess {
 public:
  /// Starts `argv`: argv[0] is the program's path, or a bare name looked up in PATH. A program that
  /// cannot be started ends at once with exit code 127 and the reason as its output, as in a shell.
  explicit ChildProcess(std::vector<std::string> argv, ProgramOptions options = {});
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// The program's pid; it stays this program's until finish() or wait_for() has reaped it.
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  /// What the program wrote so far (its whole output once it has ended).
  [[nodiscard]] std::string output() const;
  [[nodiscard]] const std::string& output_path() const noexcept { return output_path_; }
  /// Sends `signal` to the program while it has not been reaped (then nothing happens).
  void signal(int signal) const;
  /// Sends `signal` to its process group (with new_session: all it started that stayed in it).
  void signal_group(int signal) const;
  /// Its outcome once it ended within `limit` (reaped then), nullopt while it still runs.
  std::optional<CommandOutcome> wait_for(std::chrono::milliseconds limit);
  /// Its outcome, waiting up to `limit`; past it the program (its group, with new_session) is
  /// continued and killed, and the test fails naming the command.
  CommandOutcome finish(std::chrono::milliseconds limit = kCommandLimit);

 private:
  void kill_and_reap() noexcept;

  std::string command_;      // for messages
  std::string output_path_;  // stdout and stderr
  bool owns_output_ = false;
  std::string input_path_;  // a file of ours holding the stdin text; empty without
  bool new_session_ = false;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::optional<CommandOutcome> outcome_;  // once reaped
};

/// Runs `argv` to its end within `limit` (killed past it, and the test fails): its exit code (128 +
/// the signal when a signal ended it) and its stdout and stderr together.
CommandOutcome run_command(std::vector<std::string> argv, ProgramOptions options = {},
                           std::chrono::milliseconds limit = kCommandLimit);

}  // namespace dblock::test
