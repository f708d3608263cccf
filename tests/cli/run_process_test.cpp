// `dblock run`'s process model as a user meets it: what of the command may run when the lock is
// released (guard killed alone, descendants left behind or gone off with setsid), `run` under a
// real terminal (reading it, hanging it up), and the shortest lease it can keep.

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "dblock/run_processes.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"
#include "support/processes.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;
using dblock::test::eventually;
using dblock::test::process_alive;
using dblock::test::process_state;
using dblock::test::read_text;
using Outcome = dblock::test::CommandOutcome;

/// The parent of a process (the fourth field of its stat), 0 when it is gone.
pid_t parent_of(pid_t pid) {
  auto text = read_text(fmt::format("/proc/{}/stat", pid));
  auto after_name = text.rfind(") ");
  return after_name == std::string::npos ? 0 : static_cast<pid_t>(std::atoi(text.c_str() + after_name + 4));
}

class RunProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dblock-run-process.XXXXXX";
    dir_ = mkdtemp(pattern);
    sqlite_dsn_ = "sqlite://" + dir_ + "/locks.db";
  }
  void TearDown() override {
    for (pid_t pid : strays_)
      if (process_alive(pid)) kill(pid, SIGKILL);
    std::filesystem::remove_all(dir_);
  }

  /// The CLI with stdout and stderr in a file of its own.
  static dblock::test::ChildProcess start(std::vector<std::string> args) {
    args.insert(args.begin(), DBLOCK_CLI_PATH);
    return dblock::test::ChildProcess(std::move(args));
  }
  static Outcome run(std::vector<std::string> args) {
    args.insert(args.begin(), DBLOCK_CLI_PATH);
    return dblock::test::run_command(std::move(args));
  }

  /// The DSNs to run on: SQLite (a file of this test's), and PostgreSQL with a prefix of its own.
  void find_backends(std::vector<std::pair<std::string, std::string>>& backends) {
    backends = {{"sqlite", sqlite_dsn_}};
    if (!dblock::test::is_built("postgresql")) return;
    std::string server;
    DBLOCK_REQUIRE_DSN(server, "DBLOCK_TEST_PG_DSN");
    auto dsn = dblock::test::with_params(server, "prefix=" + dblock::test::unique_prefix());
    auto migrated = run({"--dsn", dsn, "migrate", "up"});
    ASSERT_EQ(migrated.exit_code, 0) << migrated.output;
    backends.emplace_back("postgresql", dsn);
  }

  std::string dir_, sqlite_dsn_;
  std::vector<pid_t> strays_;  // killed in TearDown if a failed test left them running
};

TEST_F(RunProcess, AGuardKilledAloneLeavesNothingOfTheCommandRunningOnceAContenderIsGranted) {
  std::vector<std::pair<std::string, std::string>> backends;
  find_backends(backends);
  if (HasFatalFailure() || IsSkipped()) return;
  for (auto& [label, dsn] : backends) {
    auto beats = fmt::format("{}/{}-beats", dir_, label);
    auto granted = fmt::format("{}/{}-granted", dir_, label);
    // The command's own child writes a heartbeat (nanoseconds since the epoch) every 10 ms.
    auto holder = start({"--dsn", dsn, "run", "--name", "guarded", "--ttl", "30s", "--", "sh", "-c",
                         "(while :; do date +%s%N >> '" + beats +
                             "'; sleep 0.01; done) & "
                             "echo \"started $PPID $!\"; wait"});
    pid_t guard = 0, beater = 0;
    ASSERT_TRUE(eventually([&] {
      std::istringstream words(holder.output());
      std::string word;
      return words >> word && word == "started" && words >> guard >> beater && !read_text(beats).empty();
    })) << label
        << holder.output();
    strays_.push_back(beater);
    ASSERT_EQ(getpgid(beater), guard) << label << ": the child is in the group the guard leads";
    kill(guard, SIGKILL);  // the guard alone, as an OOM killer or `kill -9` of one dblock process would

    auto contender = run({"--dsn", dsn, "run", "--name", "guarded", "--wait", "20s", "--", "sh", "-c",
                          "date +%s%N > '" + granted + "'"});
    ASSERT_EQ(contender.exit_code, 0) << label << contender.output;
    auto grant = std::stoll(read_text(granted));
    auto outcome = holder.finish();
    EXPECT_EQ(outcome.exit_code, 70) << label << outcome.output;
    EXPECT_NE(outcome.output.find("guard process"), std::string::npos) << label << outcome.output;
    EXPECT_FALSE(process_alive(beater)) << label << ": the command's child outlived its run";
    // Give a surviving child the time of many heartbeats to show itself after the grant.
    auto late = [&] {
      std::istringstream lines(read_text(beats));
      for (std::string line; std::getline(lines, line);)
        if (!line.empty() && std::stoll(line) >= grant) return true;
      return false;
    };
    EXPECT_FALSE(eventually(late, 300ms)) << label << ": a heartbeat of the first job after the contender's grant";
  }
}

TEST_F(RunProcess, WhatTheCommandLeftRunningAndWhatLeftItsSessionAreKilledBeforeTheRelease) {
  auto outcome = run({"--dsn", sqlite_dsn_, "run", "--name", "leftovers", "--", "sh", "-c",
                      "sleep 30 & setsid sh -c 'while :; do sleep 0.05; done' & echo \"started $! \"; exit 0"});
  EXPECT_EQ(outcome.exit_code, 0) << "the command's own status: " << outcome.output;
  std::istringstream words(outcome.output);
  std::string word;
  pid_t escaped = 0;
  ASSERT_TRUE(words >> word >> escaped && word == "started") << outcome.output;
  strays_.push_back(escaped);
  EXPECT_FALSE(process_alive(escaped)) << "a descendant in a session of its own outlived the run";
  EXPECT_NE(outcome.output.find("left"), std::string::npos) << "the run says it killed leftovers: " << outcome.output;
}

TEST_F(RunProcess, RunRefusesLeasesItCannotKeepAndEndsTheShortestItAcceptsAsRunOrLost) {
  for (const char* ttl : {"3ms", "50ms", "199ms"}) {
    auto refused = run({"--dsn", sqlite_dsn_, "run", "--name", "short", "--ttl", ttl, "--", "true"});
    EXPECT_EQ(refused.exit_code, 64) << ttl << refused.output;
    EXPECT_NE(refused.output.find("at least 200ms"), std::string::npos) << ttl << refused.output;
  }
  // The shortest lease it accepts, renewed several times over: the command runs to its end (0), or,
  // where renewals came late (a loaded host: two late in a row end a 200 ms lease), is stopped and
  // `run` exits 70; or, where the grant's own reply came after its TTL (the core gives such a grant
  // back), the command never starts and `run` exits 69 saying so. Never anything else. Whether 200 ms is kept is a
  // matter of the machine's speed, which no test here asserts (doc/cli.md gives the measurement behind the minimum);
  // the count kept is recorded.
  std::vector<std::pair<std::string, std::string>> backends;
  find_backends(backends);
  if (HasFatalFailure() || IsSkipped()) return;
  int kept = 0;
  for (auto& [label, dsn] : backends) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto outcome = run({"--dsn", dsn, "run", "--name", "short", "--ttl", "200ms", "--", "sleep", "1"});
      kept += outcome.exit_code == 0 ? 1 : 0;
      bool grant_came_late =
          outcome.exit_code == 69 && outcome.output.find("but the reply took longer than its TTL") != std::string::npos;
      if (outcome.exit_code != 0 && !grant_came_late) {
        EXPECT_EQ(outcome.exit_code, 70) << label << ": a run that was not kept lost its lease" << outcome.output;
      }
    }
  }
  RecordProperty("shortest_leases_kept", kept);
}

/// A program on a new pseudo-terminal, as the terminal's session (its leader, in its foreground).
class Terminal {
 public:
  explicit Terminal(std::vector<std::string> args) {
    pid_ = forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Terminal() {
    hang_up();
    if (pid_ > 0 && exit_code_ < 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  [[nodiscard]] bool started() const { return pid_ > 0 && master_ >= 0; }
  /// Reads what the terminal shows until `text` appears (or 10 s pass).
  bool wait_for(const std::string& text) {
    auto give_up = Clock::now() + 10s;
    while (screen_.find(text) == std::string::npos && Clock::now() < give_up) {
      pollfd fd{master_, POLLIN, 0};
      if (poll(&fd, 1, 50) <= 0) continue;
      char buffer[256];
      auto got = read(master_, buffer, sizeof buffer);
      if (got <= 0) break;  // EIO: every slave end is closed
      screen_.append(buffer, static_cast<std::size_t>(got));
    }
    return screen_.find(text) != std::string::npos;
  }
  void drain() {
    pollfd fd{master_, POLLIN, 0};
    char buffer[256];
    while (master_ >= 0 && poll(&fd, 1, 0) > 0) {
      auto got = read(master_, buffer, sizeof buffer);
      if (got <= 0) break;
      screen_.append(buffer, static_cast<std::size_t>(got));
    }
  }
  void type(const std::string& text) { (void)!write(master_, text.data(), text.size()); }
  /// Closes the terminal: a hang-up for every process that has it.
  void hang_up() {
    if (master_ >= 0) close(master_);
    master_ = -1;
  }
  /// The wrapper's exit code, waiting at most `limit`; -1 while it runs.
  int exit_code(std::chrono::milliseconds limit = 10s) {
    if (exit_code_ < 0)
      eventually(
          [&] {
            int status = 0;
            drain();  // so that the wrapper never blocks writing to a full terminal
            if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
            exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            return true;
          },
          limit);
    return exit_code_;
  }
  [[nodiscard]] const std::string& screen() const { return screen_; }

 private:
  pid_t pid_ = -1;
  int master_ = -1;
  int exit_code_ = -1;
  std::string screen_;
};

TEST_F(RunProcess, UnderATerminalTheCommandReadsWhatIsTyped) {
  Terminal terminal({DBLOCK_CLI_PATH, "--dsn", sqlite_dsn_, "run", "--name", "deploy", "--", "sh", "-c",
                     "printf 'continue? [y/N] '; read answer; echo \"answer=$answer\"; test \"$answer\" = y"});
  ASSERT_TRUE(terminal.started());
  ASSERT_TRUE(terminal.wait_for("continue? [y/N] ")) << terminal.screen();
  terminal.type("y\n");
  EXPECT_TRUE(terminal.wait_for("answer=y")) << "the command never got the line typed: " << terminal.screen();
  EXPECT_EQ(terminal.exit_code(), 0) << terminal.screen();
}

TEST_F(RunProcess, ATerminalHangUpEndsTheCommandAndTheRunAndFreesTheLock) {
  Terminal terminal({DBLOCK_CLI_PATH, "--dsn", sqlite_dsn_, "run", "--name", "hangup", "--", "sh", "-c",
                     "echo \"ready $$ \"; read line; while :; do sleep 0.05; done"});
  ASSERT_TRUE(terminal.started());
  ASSERT_TRUE(terminal.wait_for(" \r\n")) << terminal.screen();
  auto ready = terminal.screen().find("ready ");
  ASSERT_NE(ready, std::string::npos) << terminal.screen();
  pid_t command = std::stoi(terminal.screen().substr(ready + 6));
  strays_.push_back(command);
  // Hang up only once the command waits on the terminal (reading it, or stopped by it).
  ASSERT_TRUE(eventually([&] { return process_state(command) == 'S' || process_state(command) == 'T'; }));
  terminal.hang_up();
  EXPECT_GE(terminal.exit_code(), 0) << "the wrapper stayed behind after the hang-up";
  EXPECT_FALSE(process_alive(command)) << "the command outlived the hang-up";
  auto contender = run({"--dsn", sqlite_dsn_, "run", "--name", "hangup", "--", "true"});
  EXPECT_EQ(contender.exit_code, 0) << "the lock was not released: " << contender.output;
}

TEST_F(RunProcess, InAnInteractiveShellCtrlZStopsTheRunAndFgContinuesIt) {
  Terminal shell({"/usr/bin/env", "PS1=$ ", "TERM=dumb", "/bin/bash", "--norc", "--noprofile", "-i"});
  ASSERT_TRUE(shell.started());
  ASSERT_TRUE(shell.wait_for("$ ")) << shell.screen();
  // What the command prints is computed, so that the echo of the typed line cannot match it.
  shell.type(
      fmt::format("{} --dsn {} run --name job --ttl 30s -- sh -c 'echo \"$((6*7))-up $$ \"; read line; "
                  "echo \"got-$((6*7)) $line\"'\n",
                  DBLOCK_CLI_PATH, sqlite_dsn_));
  ASSERT_TRUE(shell.wait_for("42-up ")) << shell.screen();
  ASSERT_TRUE(shell.wait_for(" \r\n")) << shell.screen();
  pid_t command = std::stoi(shell.screen().substr(shell.screen().find("42-up ") + 6));
  strays_.push_back(command);
  pid_t wrapper = parent_of(parent_of(command));  // the command's parent is its guard, the guard's the wrapper
  strays_.push_back(wrapper);
  ASSERT_TRUE(eventually([&] { return process_state(command) == 'S' || process_state(command) == 'T'; }));

  shell.type("\x1a");  // Ctrl-Z
  EXPECT_TRUE(shell.wait_for("Stopped")) << shell.screen();
  EXPECT_TRUE(eventually([&] { return process_state(command) == 'T' && process_state(wrapper) == 'T'; }))
      << "the command and its run stop together: " << process_state(command) << process_state(wrapper);
  shell.type("fg\n");
  EXPECT_TRUE(eventually([&] { return process_state(command) == 'S' && process_state(wrapper) == 'S'; }))
      << "fg continues both: " << process_state(command) << process_state(wrapper) << shell.screen();
  shell.type("hello\n");
  EXPECT_TRUE(shell.wait_for("got-42 hello")) << "the command reads the terminal again: " << shell.screen();
  shell.type("echo \"status-$((6*7)) $?\"\n");
  EXPECT_TRUE(shell.wait_for("status-42 0")) << shell.screen();
  shell.type("exit\n");
  EXPECT_GE(shell.exit_code(), 0) << shell.screen();
}

}  // namespace

// The wrapper tells the guard each renewed deadline and the guard tells the wrapper the command's
// end: a write whose reader has just died must fail, not kill the writer with SIGPIPE before it
// reaps the group and releases the lock. It once did: CI's crash test saw a run die of SIGPIPE.
TEST(RunPipes, AWriteWhoseReaderIsGoneFailsAndLeavesNoSigpipe) {
  dblock::cli::detail::Pipe pipe;
  pipe.close_read();
  std::int64_t deadline = 42;
  EXPECT_FALSE(pipe.send(&deadline, sizeof deadline));
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0) << "the SIGPIPE the write raised was taken back";

  dblock::cli::detail::Pipe open_pipe;
  EXPECT_TRUE(open_pipe.send(&deadline, sizeof deadline));
  std::int64_t read_back = 0;
  ASSERT_EQ(read(open_pipe.read, &read_back, sizeof read_back), static_cast<ssize_t>(sizeof read_back));
  EXPECT_EQ(read_back, 42);
}
