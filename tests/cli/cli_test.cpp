// The dblock CLI as a user meets it: exit codes, messages, environment, signal forwarding.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/store.hpp>

#include "backends/backend.hpp"
#include "core/store_parts.hpp"
#include "support/admin.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/json_check.hpp"
#include "support/processes.hpp"
#include "support/roles.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

using dblock::test::process_alive;
using Outcome = dblock::test::CommandOutcome;

using Started = dblock::test::ChildProcess;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { sqlite_dsn_ = "sqlite://" + dblock::test::embedded_sqlite_path(); }
  void TearDown() override {
    dblock::test::remove_embedded_sqlite();
    for (auto& path : outputs_) std::remove(path.c_str());
  }

  /// Starts the CLI with stdout+stderr going to a file of its own, with no signal blocked whatever
  /// this process blocks: what the CLI blocks, it blocked itself.
  static Started start(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), DBLOCK_CLI_PATH);
    return Started(std::move(args), {.env = env});
  }

  static Outcome finish(Started& started) { return started.finish(); }

  static std::string finish_if_done(const Started& started) { return started.output(); }

  static Outcome run(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), DBLOCK_CLI_PATH);
    return dblock::test::run_command(std::move(args), {.env = env});
  }

  /// A command for `run` that prints "started" and holds its lock until the test creates `stop_file`
  /// (removed in TearDown): no timing window to miss.
  std::string hold_until(const std::string& stop_file) {
    outputs_.push_back(stop_file);
    return "echo started; while [ ! -e '" + stop_file + "' ]; do sleep 0.02; done";
  }

  /// Whether the command of `holder` printed "started" within 10 s.
  bool started(const Started& holder) {
    for (int i = 0; i < 1000; ++i) {
      if (finish_if_done(holder).find("started") != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  /// Whether `pid` became the CLI and holds SIGTERM back for its command (its SigBlk) within 10 s:
  /// from then on, a SIGTERM is one `run` must act on. Only the CLI's own mask counts: before the
  /// exec the child is a copy of this test, and under ThreadSanitizer it blocks every signal while it
  /// starts a thread of its own after the fork (strace: SIG_BLOCK ~[] around clone3, then the empty
  /// mask again). A SIGTERM sent in that window killed the child before the exec (CI: exit 143, no
  /// output). A mask that blocks SIGALRM too is such a full one (glibc's around a thread start does
  /// the same), never run's. Polled every millisecond: the tests send it as early as they can.
  bool holds_sigterm_back(pid_t pid) {
    auto proc = "/proc/" + std::to_string(pid);
    auto cli = std::filesystem::canonical(DBLOCK_CLI_PATH);
    for (int i = 0; i < 10000; ++i) {
      std::error_code error;
      if (std::filesystem::read_symlink(proc + "/exe", error) == cli) {
        std::ifstream status(proc + "/status");
        for (std::string line; std::getline(status, line);) {
          if (!line.starts_with("SigBlk:")) continue;
          auto mask = std::stoull(line.substr(7), nullptr, 16);
          if ((mask & (1ULL << (SIGTERM - 1))) != 0 && (mask & (1ULL << (SIGALRM - 1))) == 0) return true;
        }
      }
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  std::string sqlite_dsn_;
  std::vector<std::string> outputs_;
};

TEST_F(Cli, RunsTheCommandWithTheTokenAndPassesItsExitCode) {
  auto ok = run({"--dsn", sqlite_dsn_, "run", "--name", "job", "--", "sh", "-c",
                 "echo token=$DBLOCK_FENCING_TOKEN name=$DBLOCK_LOCK_NAME"});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("token=1 name=job"), std::string::npos) << ok.output;
  auto failing = run({"--dsn", sqlite_dsn_, "run", "--name", "job", "--", "sh", "-c", "exit 7"});
  EXPECT_EQ(failing.exit_code, 7);
  auto missing = run({"--dsn", sqlite_dsn_, "run", "--name", "job", "--", "/no/such/program"});
  EXPECT_EQ(missing.exit_code, 127);
}

// A command that cannot be started is named on stderr with the reason, escaped (it comes from the
// caller, maybe from untrusted input), and `run` exits as a shell would: 127 not found, 126 not
// executable. Both used to exit silently.
TEST_F(Cli, ACommandThatCannotBeStartedIsNamedWithTheReasonAndExits127Or126) {
  auto typo = run({"--dsn", sqlite_dsn_, "run", "--name", "job", "--", "dblock-no-such-command"});
  EXPECT_EQ(typo.exit_code, 127) << typo.output;
  EXPECT_NE(typo.output.find("cannot run 'dblock-no-such-command': command not found"), std::string::npos)
      << typo.output;
  auto missing = run({"--dsn", sqlite_dsn_, "run", "--name", "job", "--", "/no/such/program"});
  EXPECT_EQ(missing.exit_code, 127) << missing.output;
  EXPECT_NE(missing.output.find("cannot run '/no/such/program': no such file"), std::string::npos) << missing.output;

  auto script = dblock::test::embedded_sqlite_path() + ".not-executable.sh";
  outputs_.push_back(script);
  std::ofstream(script) << "#!/bin/sh\necho ran\n";  // no execute right
  auto refused = run({"--dsn", sqlite_dsn_, "run", "--name", "job", "--", script});
  EXPECT_EQ(refused.exit_code, 126) << refused.output;
  EXPECT_NE(refused.output.find("cannot run '" + script + "': not executable"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("ran"), std::string::npos) << refused.output;

  auto hostile = run({"--dsn", sqlite_dsn_, "run", "--name", "job", "--", "typo\x1b[2J\nforged"});
  EXPECT_EQ(hostile.exit_code, 127) << hostile.output;
  EXPECT_EQ(hostile.output.find('\x1b'), std::string::npos) << "no escape sequence reaches the terminal";
  EXPECT_NE(hostile.output.find("cannot run 'typo\\x1b[2J\\x0aforged'"), std::string::npos) << hostile.output;
  EXPECT_EQ(std::count(hostile.output.begin(), hostile.output.end(), '\n'), 1) << hostile.output;

  auto json =
      run({"--dsn", sqlite_dsn_, "--log-format", "json", "run", "--name", "job", "--", "dblock-no-such-command"});
  EXPECT_EQ(json.exit_code, 127) << json.output;
  EXPECT_TRUE(dblock::test::JsonCheck::is_json(json.output.substr(0, json.output.find('\n')))) << json.output;
  EXPECT_NE(json.output.find("command not found"), std::string::npos) << json.output;
}

// The arguments of the fence a command's own transaction begins with (doc/sql-contract.md): a
// permit's or a reader's fence_member needs its owner id and kind, which `run` used to keep to
// itself. The owner is the one `locks` lists for the holder; values inherited are replaced.
TEST_F(Cli, RunTellsTheCommandTheHoldersOwnerAndKindAsTheLockTableHasThem) {
  struct Case {
    std::vector<std::string> options;
    std::string kind;
  };
  for (const auto& [options, kind] :
       {Case{{}, "exclusive"}, Case{{"--permits", "2"}, "permit"}, Case{{"--shared"}, "shared"}}) {
    std::vector<std::string> args{"--dsn", sqlite_dsn_, "run", "--name", "fence-args"};
    args.insert(args.end(), options.begin(), options.end());
    // The command lists the locks while it holds its own: its owner must be there, with its kind.
    for (const char* arg : {"--", "sh", "-c",
                            "echo \"owner=$DBLOCK_LOCK_OWNER|kind=$DBLOCK_LOCK_KIND|token=$DBLOCK_FENCING_TOKEN|\"; "
                            "\"$0\" --dsn \"$1\" locks --json"})
      args.emplace_back(arg);
    args.push_back(DBLOCK_CLI_PATH);
    args.push_back(sqlite_dsn_);
    auto held = run(args, {"DBLOCK_LOCK_OWNER=inherited", "DBLOCK_LOCK_KIND=inherited"});
    ASSERT_EQ(held.exit_code, 0) << kind << ": " << held.output;
    auto field = [&](const std::string& key) {  // "key=value|" ('|' is in no host name)
      auto at = held.output.find(key + "=");
      if (at == std::string::npos) return std::string();
      at += key.size() + 1;
      return held.output.substr(at, held.output.find('|', at) - at);
    };
    auto owner = field("owner"), token = field("token");
    EXPECT_EQ(field("kind"), kind) << held.output;
    ASSERT_FALSE(owner.empty()) << held.output;
    EXPECT_NE(owner, "inherited") << held.output;
    EXPECT_NE(held.output.find(fmt::format(
                  "\"owner\":\"{}\",\"kind\":\"{}\",\"state\":\"held\",\"count\":1,\"token\":{},", owner, kind, token)),
              std::string::npos)
        << kind << ": locks lists the holder with the owner, kind and token its command was given\n"
        << held.output;
  }
}

TEST_F(Cli, DefaultsToTheEmbeddedSqliteFileFromDblockDsn) {
  auto result = run({"run", "--name", "env-dsn", "--", "true"}, {"DBLOCK_DSN=" + sqlite_dsn_});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(access(dblock::test::embedded_sqlite_path().c_str(), F_OK), 0) << "DBLOCK_DSN names the file";
}

TEST_F(Cli, GlobalOptionsAreAcceptedAfterTheSubcommand) {
  auto migrate = run({"migrate", "up", "--dsn", sqlite_dsn_});
  EXPECT_EQ(migrate.exit_code, 0) << migrate.output;
  auto held = run({"run", "--dsn", sqlite_dsn_, "--name", "late-dsn", "--", "true"});
  EXPECT_EQ(held.exit_code, 0) << held.output;
  EXPECT_EQ(access(dblock::test::embedded_sqlite_path().c_str(), F_OK), 0) << "--dsn named the file";
}

TEST_F(Cli, InvalidArgumentsExit64AndNameTheInput) {
  struct Case {
    std::vector<std::string> args;
    std::string mentions;
  };
  std::vector<Case> cases{
      {{"--dsn", sqlite_dsn_, "run", "--name", "", "--", "true"}, "lock name is empty"},
      {{"--dsn", sqlite_dsn_, "run", "--name", "x", "--ttl", "5 parsecs", "--", "true"}, "5 parsecs"},
      {{"--dsn", sqlite_dsn_, "run", "--name", "x", "--wait", "-1s", "--", "true"}, "-1s"},
      {{"--dsn", sqlite_dsn_, "run", "--name", "x", "--wait", "never", "--", "true"}, "never"},
      {{"--dsn", sqlite_dsn_, "run", "--name", "x", "--ttl", "1ms", "--", "true"}, "ttl"},
      {{"--dsn", "postgresql//missing-colon", "locks"}, "postgresql//missing-colon"},
      {{"--dsn", "redis://localhost", "locks"}, "unknown scheme 'redis'"},
      {{"--dsn", sqlite_dsn_, "release", "someone"}, "--force"},
      {{"--dsn", sqlite_dsn_, "frobnicate"}, ""},
  };
  for (auto& c : cases) {
    auto result = run(c.args);
    EXPECT_EQ(result.exit_code, 64) << result.output;
    EXPECT_NE(result.output.find(c.mentions), std::string::npos) << result.output;
  }
}

TEST_F(Cli, HeldLockExits75AndWaitAcquiresAfterRelease) {
  auto stop_file = dblock::test::embedded_sqlite_path() + ".stop";
  auto holder = start({"--dsn", sqlite_dsn_, "run", "--name", "busy", "--", "sh", "-c", hold_until(stop_file)});
  ASSERT_TRUE(started(holder)) << finish_if_done(holder);
  auto refused = run({"--dsn", sqlite_dsn_, "run", "--name", "busy", "--", "true"});
  EXPECT_EQ(refused.exit_code, 75) << refused.output;
  EXPECT_NE(refused.output.find("busy"), std::string::npos) << "the message names the lock: " << refused.output;
  // `forever`: the shell fleet's leader election (doc/cli.md); this one is granted at the release.
  auto waiter = start({"--dsn", sqlite_dsn_, "run", "--name", "busy", "--wait", "forever", "--", "true"});
  std::ofstream(stop_file) << "stop";
  EXPECT_EQ(finish(holder).exit_code, 0);
  auto waited = finish(waiter);
  EXPECT_EQ(waited.exit_code, 0) << "the waiter acquires once the holder releases: " << waited.output;
}

TEST_F(Cli, PermitsAndSharedRunsHoldANameTogetherAndTheLocksListShowsEachHolder) {
  auto stop_file = dblock::test::embedded_sqlite_path() + ".groups-stop";
  auto hold = hold_until(stop_file);
  auto permit = start({"--dsn", sqlite_dsn_, "run", "--name", "pool", "--permits", "2", "--", "sh", "-c", hold});
  auto reader = start({"--dsn", sqlite_dsn_, "run", "--name", "table", "--shared", "--", "sh", "-c", hold});
  ASSERT_TRUE(started(permit)) << finish_if_done(permit);
  ASSERT_TRUE(started(reader)) << finish_if_done(reader);
  EXPECT_EQ(run({"--dsn", sqlite_dsn_, "run", "--name", "pool", "--permits", "2", "--", "true"}).exit_code, 0)
      << "a second permit of two";
  EXPECT_EQ(run({"--dsn", sqlite_dsn_, "run", "--name", "table", "--shared", "--", "true"}).exit_code, 0)
      << "a second reader";
  EXPECT_EQ(run({"--dsn", sqlite_dsn_, "run", "--name", "pool", "--", "true"}).exit_code, 75) << "a plain run waits";
  EXPECT_EQ(run({"--dsn", sqlite_dsn_, "run", "--name", "table", "--", "true"}).exit_code, 75) << "the writer waits";
  auto listed = run({"--dsn", sqlite_dsn_, "locks"});
  EXPECT_NE(listed.output.find("KIND"), std::string::npos) << listed.output;
  EXPECT_NE(listed.output.find("permit"), std::string::npos) << listed.output;
  EXPECT_NE(listed.output.find("shared"), std::string::npos) << listed.output;
  auto json = run({"--dsn", sqlite_dsn_, "locks", "--json"});
  EXPECT_NE(json.output.find("\"kind\":\"permit\""), std::string::npos) << json.output;
  auto both = run({"--dsn", sqlite_dsn_, "run", "--name", "x", "--permits", "2", "--shared", "--", "true"});
  EXPECT_EQ(both.exit_code, 64) << both.output;
  auto zero = run({"--dsn", sqlite_dsn_, "run", "--name", "x", "--permits", "0", "--", "true"});
  EXPECT_EQ(zero.exit_code, 64) << zero.output;
  std::ofstream(stop_file) << "stop";
  EXPECT_EQ(finish(permit).exit_code, 0);
  EXPECT_EQ(finish(reader).exit_code, 0);
}

// A stop request while `run` still waits for the lock (Ctrl-C, systemctl stop, timeout(1)) ends it
// there: it used to be held back until the grant, and then lost, and the command ran to its end.
TEST_F(Cli, ASignalWhileWaitingForTheLockEndsRunWithoutRunningTheCommand) {
  auto stop_file = dblock::test::embedded_sqlite_path() + ".stop";
  auto holder = start({"--dsn", sqlite_dsn_, "run", "--name", "busy", "--", "sh", "-c", hold_until(stop_file)});
  ASSERT_TRUE(started(holder)) << finish_if_done(holder);
  auto waiter =
      start({"--dsn", sqlite_dsn_, "run", "--name", "busy", "--wait", "20s", "--", "sh", "-c", "echo command-ran"});
  ASSERT_TRUE(holds_sigterm_back(waiter.pid()));
  kill(waiter.pid(), SIGTERM);
  auto stopped = finish(waiter);
  std::ofstream(stop_file) << "stop";
  EXPECT_EQ(finish(holder).exit_code, 0);
  EXPECT_EQ(stopped.exit_code, 128 + SIGTERM) << stopped.output;
  EXPECT_NE(stopped.output.find("was not run"), std::string::npos) << stopped.output;
  EXPECT_EQ(stopped.output.find("command-ran"), std::string::npos) << "the command ran after all: " << stopped.output;
}

// `run --wait --fair` queues in the name's fair queue: each waiter says its place on stderr and
// `dblock locks` lists it; a stop request while it waits ends the wait at once (one call, not slices
// that would queue again at the back) without running the command, and leaves the queue, while the
// waiter before it keeps its place and runs when the holder ends. --fair asks for a plain exclusive
// table lock that waits.
TEST_F(Cli, AFairRunSaysItsPlaceAndAStopRequestLeavesTheQueueWithoutRunningTheCommand) {
  auto says = [](const Started& runner, const std::string& text) {
    for (int i = 0; i < 3000; ++i) {
      if (runner.output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  auto waiting = [&] {
    auto listed = run({"--dsn", sqlite_dsn_, "locks", "--json"});
    int count = 0;
    for (auto at = listed.output.find("\"state\":\"waiting\""); at != std::string::npos;
         at = listed.output.find("\"state\":\"waiting\"", at + 1))
      ++count;
    return count;
  };
  auto stop_file = dblock::test::embedded_sqlite_path() + ".stop";
  auto holder = start({"--dsn", sqlite_dsn_, "run", "--name", "fair", "--", "sh", "-c", hold_until(stop_file)});
  ASSERT_TRUE(started(holder)) << finish_if_done(holder);
  auto first = start(
      {"--dsn", sqlite_dsn_, "run", "--name", "fair", "--wait", "60s", "--fair", "--", "sh", "-c", "echo first-ran"});
  ASSERT_TRUE(says(first, "place 1 in its queue")) << first.output();
  auto second = start(
      {"--dsn", sqlite_dsn_, "run", "--name", "fair", "--wait", "60s", "--fair", "--", "sh", "-c", "echo second-ran"});
  ASSERT_TRUE(says(second, "place 2 in its queue")) << second.output();
  EXPECT_EQ(waiting(), 2);
  kill(second.pid(), SIGTERM);
  auto stopped = finish(second);
  EXPECT_EQ(stopped.exit_code, 128 + SIGTERM) << stopped.output;
  EXPECT_NE(stopped.output.find("was not run"), std::string::npos) << stopped.output;
  EXPECT_EQ(stopped.output.find("second-ran"), std::string::npos) << "the command ran after all: " << stopped.output;
  EXPECT_EQ(waiting(), 1) << "the stopped waiter is still queued, or the first one left";
  std::ofstream(stop_file) << "stop";
  EXPECT_EQ(finish(holder).exit_code, 0);
  auto ran = finish(first);
  EXPECT_EQ(ran.exit_code, 0) << ran.output;
  EXPECT_NE(ran.output.find("first-ran"), std::string::npos) << ran.output;
  EXPECT_EQ(waiting(), 0);
  EXPECT_NE(run({"--dsn", sqlite_dsn_, "locks"}).output.find("no locks"), std::string::npos);
  for (std::vector<std::string> refused : {std::vector<std::string>{"--fair"},
                                           {"--fair", "--wait", "1s", "--shared"},
                                           {"--fair", "--wait", "1s", "--permits", "2"},
                                           {"--fair", "--wait", "1s", "--mode", "advisory"},
                                           {"--fair", "--wait", "1s", "--min-hold", "1s"}}) {
    std::vector<std::string> args{"--dsn", sqlite_dsn_, "run", "--name", "fair"};
    args.insert(args.end(), refused.begin(), refused.end());
    args.insert(args.end(), {"--", "echo", "refused-ran"});
    auto outcome = run(args);
    EXPECT_EQ(outcome.exit_code, 64) << refused.size() << " options, the first " << refused.front() << ": "
                                     << outcome.output;
    EXPECT_EQ(outcome.output.find("refused-ran"), std::string::npos) << outcome.output;
  }
}

// A stop request that reaches `run` before its command started (while the store opens, the lock is
// taken, the guard sets up) ends `run` with the command not run, or the command at once. It was
// forwarded to a group the command was not in yet, and ignored there: the command ran to its end.
TEST_F(Cli, AStopRequestBeforeTheCommandStartedNeverLetsItRunToItsEnd) {
  int not_run = 0;
  // The command takes 5 s, so that a late kill (this thread descheduled on a loaded machine) still
  // comes before its end; a command that is stopped ends at once, so a passing trial is short.
  for (int trial = 0; trial < 20; ++trial) {
    auto runner = start({"--dsn", sqlite_dsn_, "run", "--name", "early", "--", "sh", "-c", "sleep 5; echo finished"});
    ASSERT_TRUE(holds_sigterm_back(runner.pid()));
    kill(runner.pid(), SIGTERM);
    auto outcome = finish(runner);
    EXPECT_EQ(outcome.exit_code, 128 + SIGTERM) << "trial " << trial << ": " << outcome.output;
    EXPECT_EQ(outcome.output.find("finished"), std::string::npos)
        << "trial " << trial << ": the command ran to its end after the stop request: " << outcome.output;
    not_run += outcome.output.find("was not run") != std::string::npos ? 1 : 0;
  }
  RecordProperty("stopped_before_the_command", not_run);
}

TEST_F(Cli, ForwardsSigtermToTheCommand) {
  auto holder = start({"--dsn", sqlite_dsn_, "run", "--name", "sig", "--", "sh", "-c",
                       "trap 'echo got-term; exit 42' TERM; echo started; while :; do sleep 0.05; done"});
  bool running = false;
  for (int i = 0; i < 500 && !running; ++i) {
    std::ifstream out(holder.output_path());
    std::stringstream text;
    text << out.rdbuf();
    running = text.str().find("started") != std::string::npos;
    if (!running) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(running);
  kill(holder.pid(), SIGTERM);
  auto outcome = finish(holder);
  EXPECT_EQ(outcome.exit_code, 42) << outcome.output;
  EXPECT_NE(outcome.output.find("got-term"), std::string::npos) << outcome.output;
  auto after = run({"--dsn", sqlite_dsn_, "locks"});
  EXPECT_NE(after.output.find("no locks"), std::string::npos) << "released after the command ended: " << after.output;
}

TEST_F(Cli, LostLeaseStopsTheCommandAndExits70) {
  auto holder = start({"--dsn", sqlite_dsn_, "run", "--name", "fragile", "--ttl", "1s", "--", "sh", "-c",
                       "trap 'echo got-term; exit 0' TERM; echo started; while :; do sleep 0.05; done"});
  bool running = false;
  for (int i = 0; i < 500 && !running; ++i) {
    running = finish_if_done(holder).find("started") != std::string::npos;
    if (!running) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(running);
  ASSERT_EQ(run({"--dsn", sqlite_dsn_, "release", "--force", "fragile"}).exit_code, 0);
  auto outcome = finish(holder);  // the watchdog notices within a renew interval (333 ms)
  EXPECT_EQ(outcome.exit_code, 70) << outcome.output;
  EXPECT_NE(outcome.output.find("got-term"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("lost"), std::string::npos) << outcome.output;
}

/// Starts `dblock run` with a command whose shell runs `sleep 30` as a child (in its process group)
/// and waits until the command has started; returns the child's pid.
pid_t start_with_grandchild(Started& holder, const std::function<std::string(const Started&)>& output) {
  std::string text;
  for (int i = 0; i < 500 && text.find("started ") == std::string::npos; ++i) {
    text = output(holder);
    if (text.find("started ") == std::string::npos) std::this_thread::sleep_for(10ms);
  }
  auto at = text.find("started ");
  if (at == std::string::npos) return 0;
  return static_cast<pid_t>(std::stoi(text.substr(at + 8)));
}

TEST_F(Cli, ACommandIgnoringSigtermIsKilledWithItsWholeGroupAfterALoss) {
  auto holder = start({"--dsn", sqlite_dsn_, "run", "--name", "stubborn", "--ttl", "1s", "--", "sh", "-c",
                       "trap '' TERM; sleep 30 & echo \"started $!\"; wait"});
  auto child = start_with_grandchild(holder, [&](const Started& h) { return finish_if_done(h); });
  ASSERT_GT(child, 0);
  ASSERT_EQ(run({"--dsn", sqlite_dsn_, "release", "--force", "stubborn"}).exit_code, 0);
  auto outcome = finish(holder);  // SIGTERM is ignored: SIGKILL follows --grace (100 ms) later
  EXPECT_EQ(outcome.exit_code, 70) << outcome.output;
  // Killed by the wrapper (grace after the loss) or by its guard (at the deadline it was told), whichever came first.
  EXPECT_TRUE(outcome.output.find("killing its process group") != std::string::npos ||
              outcome.output.find("was killed at the lease's local deadline") != std::string::npos)
      << outcome.output;
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = !process_alive(child);
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "the command's own child must die with the group";
}

TEST_F(Cli, KillingTheWrapperKillsItsCommandAndTheCommandsChildren) {
  auto holder = start({"--dsn", sqlite_dsn_, "run", "--name", "orphan", "--ttl", "30s", "--", "sh", "-c",
                       "sleep 30 & echo \"started $!\"; wait"});
  auto child = start_with_grandchild(holder, [&](const Started& h) { return finish_if_done(h); });
  ASSERT_GT(child, 0);
  kill(holder.pid(), SIGKILL);  // the wrapper alone, as an OOM killer or `kill -9` would
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = !process_alive(child);
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "no orphan may work on without the lock";
  finish(holder);
}

TEST_F(Cli, NoPasswordInAnyOutputForHostileDsns) {
  std::string dsn;
  DBLOCK_REQUIRE_DSN(dsn, "DBLOCK_TEST_PG_DSN");
  auto authority_end = dsn.find('@');
  auto user = dsn.substr(0, dsn.find(':', dsn.find("://") + 3));  // postgresql://dblock
  auto rest = dsn.substr(authority_end);                          // @127.0.0.1:PORT/db
  const std::vector<std::pair<std::string, std::string>> cases{
      {user + ":Sec%zzRet77" + rest, "Sec%zzRet77"},
      {user + ":pa/ss?wo@rd" + rest, "pa/ss?wo@rd"},
      {user + rest + "?password=Top%zzSecret", "Top%zzSecret"},
      {user + rest + "?sslpassword=KeyPhrase99&sslmode=require", "KeyPhrase99"},
      {user + rest + "?pass%77ord=Encoded77Key", "Encoded77Key"},
  };
  for (auto& [hostile, secret] : cases) {
    for (const char* level : {"debug", "trace"}) {
      auto outcome = run({"--dsn", hostile, "--log-level", level, "locks"});
      EXPECT_NE(outcome.exit_code, 0) << hostile;
      EXPECT_EQ(outcome.output.find(secret), std::string::npos) << outcome.output;
    }
  }
}

TEST_F(Cli, TheEmbeddedDefaultIsOneFilePerUserWhateverTheWorkingDirectory) {
  char pattern[] = "/tmp/dblock-state.XXXXXX";
  std::string state = mkdtemp(pattern);
  auto dir = state + "/lib";  // missing: created on first use
  std::string cwd_a = state + "/a", cwd_b = state + "/b";
  std::filesystem::create_directories(cwd_a);
  std::filesystem::create_directories(cwd_b);
  auto in_dir = [&](const std::string& cwd, std::vector<std::string> args) {
    args.insert(args.begin(), DBLOCK_CLI_PATH);
    return dblock::test::run_command(
        std::move(args), {.env = {"DBLOCK_DSN", "DBLOCK_STATE_DIR=" + dir}, .cwd = cwd, .output = cwd + "/out"});
  };
  auto output_in = [](const std::string& cwd) {
    std::ifstream in(cwd + "/out");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  auto holder = start({"run", "--name", "cron-job", "--", "sleep", "30"}, {"DBLOCK_STATE_DIR=" + dir});
  bool held = false;
  for (int i = 0; i < 500 && !held; ++i) {
    held = in_dir(cwd_a, {"locks"}).exit_code == 0 && output_in(cwd_a).find("cron-job") != std::string::npos;
    if (!held) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(held) << finish_if_done(holder);
  auto second = in_dir(cwd_b, {"run", "--name", "cron-job", "--", "true"});
  EXPECT_EQ(second.exit_code, 75) << "another working directory, the same host: the same lock";
  EXPECT_NE(output_in(cwd_a).find("store: sqlite://" + dir + "/dblock.db"), std::string::npos) << output_in(cwd_a);
  // The caller's alone: no other user can write the directory or the file (tests/cli/multiuser_test.cpp).
  using std::filesystem::perms;
  EXPECT_EQ(std::filesystem::status(dir).permissions() & (perms::group_write | perms::others_write), perms::none);
  EXPECT_EQ(std::filesystem::status(dir + "/dblock.db").permissions(), perms::owner_read | perms::owner_write);
  kill(holder.pid(), SIGTERM);
  finish(holder);
  std::filesystem::remove_all(state);
}

TEST_F(Cli, AnEmptyDsnIsAnErrorNeverTheEmbeddedDefault) {
  auto flag = run({"--dsn", "", "locks"});
  EXPECT_EQ(flag.exit_code, 64) << flag.output;
  EXPECT_NE(flag.output.find("--dsn is empty"), std::string::npos) << flag.output;
  auto variable = run({"locks"}, {"DBLOCK_DSN="});
  EXPECT_EQ(variable.exit_code, 64) << variable.output;
  EXPECT_NE(variable.output.find("DBLOCK_DSN is set but empty"), std::string::npos) << variable.output;
}

TEST_F(Cli, VersionNamesTheReleaseTheCommitAndEveryBackendsDriver) {
  auto version = run({"--version"});
  EXPECT_EQ(version.exit_code, 0) << version.output;
  for (const char* expected : {"dblock 0.", "commit ", "sqlite (SOCI ", "SQLite 3."})
    EXPECT_NE(version.output.find(expected), std::string::npos) << expected << "\n" << version.output;
  // Exactly the backends of this build (CMake's DBLOCK_WITH_POSTGRES / DBLOCK_WITH_MYSQL).
  EXPECT_EQ(version.output.find("postgresql (libpq ") != std::string::npos, dblock::test::is_built("postgresql"))
      << version.output;
  EXPECT_EQ(version.output.find("mysql (MySQL Connector/C++ ") != std::string::npos, dblock::test::is_built("mysql"))
      << version.output;
}

TEST_F(Cli, HostileNamesPrintAsOneEscapedRowEachOnEveryBackend) {
  const std::string hostile = "\x1b[31mred\x1b[0m\nforged   1   2   3s  someone\r\t\x7f\u202e\\end";
  std::vector<std::pair<std::string, std::string>> backends{{"sqlite", sqlite_dsn_}};
  for (const char* variable : {"DBLOCK_TEST_PG_DSN", "DBLOCK_TEST_MYSQL_DSN"}) {
    if (!dblock::test::is_built(dblock::test::dialect_of_env(variable))) continue;
    std::string dsn;
    DBLOCK_REQUIRE_DSN(dsn, variable);
    backends.emplace_back(variable, dblock::test::with_params(dsn, "prefix=" + dblock::test::unique_prefix()));
  }
  for (auto& [label, dsn] : backends) {
    ASSERT_EQ(run({"--dsn", dsn, "migrate", "up"}).exit_code, 0) << label;
    auto holder = start({"--dsn", dsn, "run", "--name", hostile, "--ttl", "30s", "--", "sleep", "30"});
    bool held = false;
    for (int i = 0; i < 500 && !held; ++i) {
      held = run({"--dsn", dsn, "locks", "--json"}).output.find("\"count\":1") != std::string::npos;
      if (!held) std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(held) << label << finish_if_done(holder);
    // A waiter of the fair queue behind it, whose name and owner are hostile too.
    auto store = dblock::Store::open(dsn);
    auto& queue = dblock::detail::StoreParts::backend(*store).queue().get();
    auto waiter = queue.take_turn(hostile, hostile, 30s, 60s, 0);
    ASSERT_GT(waiter.seq, 0) << label;
    auto text = run({"--dsn", dsn, "locks"});
    ASSERT_EQ(text.exit_code, 0) << label << text.output;
    EXPECT_EQ(std::count(text.output.begin(), text.output.end(), '\n'), 5)
        << label << ": store, header, one row, the waiters' header, one waiter\n"
        << text.output;
    EXPECT_EQ(text.output.find('\x1b'), std::string::npos) << label << ": no escape sequence reaches the terminal";
    EXPECT_EQ(text.output.find('\r'), std::string::npos) << label;
    EXPECT_EQ(text.output.find("\u202e"), std::string::npos) << label << ": no bidirectional override";
    EXPECT_NE(text.output.find("\\x1b[31mred\\x1b[0m\\x0aforged"), std::string::npos) << label << text.output;
    EXPECT_NE(text.output.find("\\u{202e}\\\\end"), std::string::npos) << label << text.output;
    auto json = run({"--dsn", dsn, "locks", "--json"});
    EXPECT_TRUE(dblock::test::JsonCheck::is_json(json.output)) << label << json.output;
    EXPECT_NE(json.output.find("\\u001b[31mred"), std::string::npos) << label << json.output;
    EXPECT_NE(json.output.find("\"state\":\"waiting\",\"position\":1,"), std::string::npos) << label << json.output;
    EXPECT_TRUE(queue.leave(hostile, hostile, waiter.seq)) << label;
    auto released = run({"--dsn", dsn, "release", "--force", hostile});
    EXPECT_EQ(released.exit_code, 0) << label << released.output;
    EXPECT_EQ(released.output.find('\x1b'), std::string::npos) << label << released.output;
    EXPECT_EQ(std::count(released.output.begin(), released.output.end(), '\n'), 2)
        << label << ": the log line + the answer\n"
        << released.output;
    kill(holder.pid(), SIGTERM);
    finish(holder);
  }
}

TEST_F(Cli, UnderJsonLogFormatEveryStderrLineIsOneJsonObject) {
  const std::string hostile = "job\n\x1b[2Jnot-json";
  auto holder = start({"--dsn", sqlite_dsn_, "--log-format", "json", "--log-level", "info", "run", "--name", hostile,
                       "--ttl", "1s", "--", "sh", "-c",
                       "echo started >&2; exec 2>/dev/null; trap 'exit 0' TERM; while :; do sleep 0.05; done"});
  bool running = false;
  for (int i = 0; i < 500 && !running; ++i) {
    running = finish_if_done(holder).find("started") != std::string::npos;
    if (!running) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(running);
  ASSERT_EQ(run({"--dsn", sqlite_dsn_, "release", "--force", hostile}).exit_code, 0);
  auto outcome = finish(holder);
  EXPECT_EQ(outcome.exit_code, 70) << outcome.output;
  std::istringstream lines(outcome.output);
  int dblock_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line == "started") continue;  // the command's own output is not dblock's
    ++dblock_lines;
    EXPECT_TRUE(dblock::test::JsonCheck::is_json(line)) << line;
    EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
  }
  EXPECT_GE(dblock_lines, 2) << "the loss warning and run's report\n" << outcome.output;
  auto usage = run({"--log-format", "json", "run", "--no-such-option"});
  EXPECT_EQ(usage.exit_code, 64);
  EXPECT_TRUE(dblock::test::JsonCheck::is_json(usage.output.substr(0, usage.output.find('\n')))) << usage.output;
}

TEST_F(Cli, LocksJsonAndForceRelease) {
  auto holder = start({"--dsn", sqlite_dsn_, "run", "--name", "json \"quoted\"", "--ttl", "60s", "--", "sleep", "30"});
  std::string listing;
  for (int i = 0; i < 500 && listing.find("quoted") == std::string::npos; ++i) {
    listing = run({"--dsn", sqlite_dsn_, "locks", "--json"}).output;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(listing.find("\"name\":\"json \\\"quoted\\\"\""), std::string::npos) << listing;
  EXPECT_NE(listing.find("\"count\":1"), std::string::npos) << listing;
  auto broken = run({"--dsn", sqlite_dsn_, "release", "--force", "json \"quoted\""});
  EXPECT_EQ(broken.exit_code, 0) << broken.output << "\nholder: " << finish_if_done(holder);
  EXPECT_EQ(run({"--dsn", sqlite_dsn_, "release", "--force", "json \"quoted\""}).exit_code, 1) << "already gone";
  kill(holder.pid(), SIGTERM);
  finish(holder);
}

TEST_F(Cli, ServerErrorsExit69And78WithoutPrintingThePassword) {
  std::string dsn;
  DBLOCK_REQUIRE_DSN(dsn, "DBLOCK_TEST_PG_DSN");
  auto wrong = dsn;
  auto colon = wrong.find(':', wrong.find("://") + 3);
  wrong.replace(colon + 1, wrong.find('@') - colon - 1, "not-the-password");
  auto refused = run({"--dsn", wrong, "locks"});
  EXPECT_EQ(refused.exit_code, 69) << refused.output;
  EXPECT_EQ(refused.output.find("not-the-password"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("password"), std::string::npos) << refused.output;

  auto unreachable = run({"--dsn", "postgresql://u:pw@127.0.0.1:1/db", "locks"});
  EXPECT_EQ(unreachable.exit_code, 69) << unreachable.output;

  auto unmigrated = dblock::test::with_params(dsn, "prefix=" + dblock::test::unique_prefix());
  auto missing = run({"--dsn", unmigrated, "run", "--name", "x", "--", "true"});
  EXPECT_EQ(missing.exit_code, 78) << missing.output;
  EXPECT_NE(missing.output.find("dblock migrate up"), std::string::npos) << missing.output;
  EXPECT_EQ(run({"--dsn", unmigrated, "migrate", "up"}).exit_code, 0);
  EXPECT_EQ(run({"--dsn", unmigrated, "run", "--name", "x", "--", "true"}).exit_code, 0);
}

// MariaDB's Connector/C opens its sockets without close-on-exec: the command must not inherit dblock's
// connections (an authenticated session as dblock's user, kept open after dblock is gone), while
// what dblock itself was started with (here the test's own descriptors) still reaches it.
TEST_F(Cli, TheCommandInheritsNoneOfDblocksOwnConnections) {
  std::string server;
  DBLOCK_REQUIRE_DSN(server, "DBLOCK_TEST_MYSQL_DSN");
  auto dsn = dblock::test::with_params(server, "prefix=" + dblock::test::unique_prefix());
  ASSERT_EQ(run({"--dsn", dsn, "migrate", "up"}).exit_code, 0);
  const std::vector<std::string> count_sockets{"sh", "-c", "echo sockets=$(ls -l /proc/$$/fd | grep -c socket:)"};
  auto sockets_of = [&](std::vector<std::string> args) {
    args.insert(args.end(), count_sockets.begin(), count_sockets.end());
    auto result = run(args);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    auto at = result.output.find("sockets=");
    return at == std::string::npos ? -1 : std::stoi(result.output.substr(at + 8));
  };
  // SQLite opens no socket: what the command gets there is what dblock was given.
  auto given = sockets_of({"--dsn", sqlite_dsn_, "run", "--name", "fd-job", "--"});
  ASSERT_GE(given, 0);
  EXPECT_EQ(sockets_of({"--dsn", dsn, "run", "--mode", "advisory", "--name", "fd-job", "--"}), given)
      << "the command inherited dblock's connection (GET_LOCK mode pins one for the lock)";
  EXPECT_EQ(sockets_of({"--dsn", dsn, "run", "--name", "fd-job", "--"}), given);
}

TEST_F(Cli, EverySubcommandWorksWithAMysqlDsn) {
  std::string server;
  DBLOCK_REQUIRE_DSN(server, "DBLOCK_TEST_MYSQL_DSN");
  auto prefix = dblock::test::unique_prefix();
  auto dsn = dblock::test::with_params(server, "prefix=" + prefix);
  auto up = run({"--dsn", dsn, "migrate", "up"});
  ASSERT_EQ(up.exit_code, 0) << up.output;
  auto status = run({"--dsn", dsn, "migrate", "status"});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("applied"), std::string::npos) << status.output;
  EXPECT_EQ(status.output.find("pending"), std::string::npos) << status.output;
  EXPECT_EQ(run({"--dsn", dsn, "migrate", "verify"}).exit_code, 0);
  auto script = run({"--dsn", dsn, "migrate", "sql"});
  EXPECT_EQ(script.exit_code, 0);
  EXPECT_NE(script.output.find("DELIMITER $$"), std::string::npos) << script.output;

  auto table = run({"--dsn", dsn, "run", "--name", "cli-job", "--", "sh", "-c", "echo token=$DBLOCK_FENCING_TOKEN"});
  EXPECT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("token=1"), std::string::npos) << table.output;
  auto advisory = run({"--dsn", dsn, "run", "--mode", "advisory", "--name", "cli-job", "--", "true"});
  EXPECT_EQ(advisory.exit_code, 0) << advisory.output;

  auto holder = start({"--dsn", dsn, "run", "--name", "held-by-cli", "--ttl", "60s", "--", "sleep", "30"});
  std::string listing;
  for (int i = 0; i < 500 && listing.find("held-by-cli") == std::string::npos; ++i) {
    listing = run({"--dsn", dsn, "locks", "--json"}).output;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(listing.find("\"name\":\"held-by-cli\""), std::string::npos) << listing;
  EXPECT_EQ(run({"--dsn", dsn, "run", "--name", "held-by-cli", "--", "true"}).exit_code, 75) << "held elsewhere";
  EXPECT_EQ(run({"--dsn", dsn, "release", "--force", "held-by-cli"}).exit_code, 0);
  kill(holder.pid(), SIGTERM);
  finish(holder);

  auto admin = dblock::test::make_admin("mysql", server, "dblock", prefix);
  admin->insert_expired("abandoned/", 3);
  auto reaped = run({"--dsn", dsn, "reaper", "--once"});
  EXPECT_EQ(reaped.exit_code, 0) << reaped.output;
  EXPECT_EQ(admin->query("SELECT count(*) FROM \"" + prefix + "locks\" WHERE name LIKE 'abandoned/%'").at(0), "0");

  auto bench =
      run({"--dsn", dsn, "bench", "--json", "--scenario", "uncontended", "--threads", "1", "--duration", "100ms"});
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("\"scenario\":\"uncontended\""), std::string::npos) << bench.output;

  auto wrong = server;
  wrong.replace(wrong.find(':', wrong.find("://") + 3) + 1,
                wrong.find('@') - wrong.find(':', wrong.find("://") + 3) - 1, "not-the-password");
  auto refused = run({"--dsn", wrong, "locks"});
  EXPECT_EQ(refused.exit_code, 69) << refused.output;
  EXPECT_EQ(refused.output.find("not-the-password"), std::string::npos) << refused.output;
}

TEST_F(Cli, ARuntimeRoleWithOnlyThePrintedGrantsRunsEverySubcommandButCannotMigrateAnEmptyDatabase) {
  for (auto [variable, dialect] :
       {std::pair{"DBLOCK_TEST_PG_DSN", "postgresql"}, std::pair{"DBLOCK_TEST_MYSQL_DSN", "mysql"}}) {
    if (!dblock::test::is_built(dialect)) continue;
    std::string server;
    DBLOCK_REQUIRE_DSN(server, variable);
    auto prefix = dblock::test::unique_prefix();
    auto owner_dsn = dblock::test::with_params(server, "prefix=" + prefix);
    auto admin =
        dblock::test::make_admin(dialect, server, dialect == std::string("mysql") ? "dblock" : "public", prefix);
    ASSERT_EQ(run({"--dsn", owner_dsn, "migrate", "up"}).exit_code, 0) << dialect;  // the deploy step
    dblock::test::TestRole role(*admin, dialect, server, "r" + prefix);
    auto grants = run({"--dsn", owner_dsn, "migrate", "grants", "--role", role.account()});
    ASSERT_EQ(grants.exit_code, 0) << grants.output;
    EXPECT_GE(role.grant(grants.output), 5) << grants.output;
    auto dsn = dblock::test::with_params(role.dsn(), "prefix=" + prefix);

    auto up = run({"--dsn", dsn, "migrate", "up"});  // the init container
    EXPECT_EQ(up.exit_code, 0) << dialect << up.output;
    EXPECT_NE(up.output.find("up to date"), std::string::npos) << up.output;
    auto status = run({"--dsn", dsn, "migrate", "status"});
    EXPECT_EQ(status.exit_code, 0) << dialect << status.output;
    // A lease of 3 s outlived: the watchdog's renewals work for the role (with 1 s, ASan's build
    // beside a loaded run's other tests renewed too late once, and the command was stopped).
    auto renewed = run({"--dsn", dsn, "run", "--name", "job", "--ttl", "3s", "--", "sleep", "4"});
    EXPECT_EQ(renewed.exit_code, 0) << dialect << renewed.output;
    auto advisory = run({"--dsn", dsn, "run", "--mode", "advisory", "--name", "job", "--", "sh", "-c",
                         "test \"$DBLOCK_FENCING_TOKEN\" -gt 0"});
    EXPECT_EQ(advisory.exit_code, 0) << dialect << advisory.output;

    // A lease of 3 s: a revoked holder is told within a second, and its run lets go once its command is dead.
    auto holder = start({"--dsn", dsn, "run", "--name", "held", "--ttl", "3s", "--", "sleep", "30"});
    std::string listing;
    for (int i = 0; i < 500 && listing.find("\"held\"") == std::string::npos; ++i) {
      listing = run({"--dsn", dsn, "locks", "--json"}).output;
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_NE(listing.find("\"name\":\"held\""), std::string::npos) << dialect << listing << finish_if_done(holder);
    auto waiter = start({"--dsn", dsn, "run", "--name", "held", "--wait", "20s", "--", "true"});
    auto released = run({"--dsn", dsn, "release", "--force", "held"});
    EXPECT_EQ(released.exit_code, 0) << dialect << released.output;
    EXPECT_EQ(finish(waiter).exit_code, 0) << dialect << ": the waiter gets the released lock";
    kill(holder.pid(), SIGTERM);
    finish(holder);

    admin->insert_expired("abandoned/", 3);
    auto reaped = run({"--dsn", dsn, "reaper", "--once"});
    EXPECT_EQ(reaped.exit_code, 0) << dialect << reaped.output;
    EXPECT_EQ(
        admin
            ->query(fmt::format("SELECT count(*) FROM {} WHERE name LIKE 'abandoned/%'",
                                dialect == std::string("mysql") ? "`" + prefix + "locks`" : "\"" + prefix + "locks\""))
            .at(0),
        "0");

    // The same role on an installation nobody migrated: exit 77, the right named, nothing created.
    auto fresh = dblock::test::unique_prefix();
    auto refused = run({"--dsn", dblock::test::with_params(role.dsn(), "prefix=" + fresh), "migrate", "up"});
    EXPECT_EQ(refused.exit_code, 77) << dialect << refused.output;
    EXPECT_NE(refused.output.find(dialect == std::string("mysql") ? "CREATE on `dblock`.*" : "CREATE on schema public"),
              std::string::npos)
        << refused.output;
    EXPECT_FALSE(admin->table_exists(fresh + "schema_history")) << dialect;
  }
}

}  // namespace
