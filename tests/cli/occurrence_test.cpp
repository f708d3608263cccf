// Scheduled jobs across a fleet, as the shipped unit runs them: the ExecStart= line of the
// configured dblock-run@.service in the build directory, run by several simulated hosts (processes
// with their own state directories) sharing one database, fired as a timer with AccuracySec=1s
// spread fires them (0.45 s apart) plus one host catching up 4 s later (Persistent=true). Only the
// period is substituted (DBLOCK_ONCE_PER, an environment variable of the unit), to keep it short.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/lock_manager.hpp>
#include <dblock/migrate.hpp>
#include <dblock/occurrence.hpp>
#include <dblock/reaper.hpp>
#include <dblock/store.hpp>

#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

constexpr auto kPeriod = 6s;  // substituted for the unit's DBLOCK_ONCE_PER (1h)

struct Unit {
  std::map<std::string, std::string> environment;  // Environment= lines, in order
  std::string exec_start;
};

Unit read_unit(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "no configured unit at " << path;
  Unit unit;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Environment=", 0) == 0) {
      auto assignment = line.substr(12);
      if (assignment.size() >= 2 && assignment.front() == '"') assignment = assignment.substr(1, assignment.size() - 2);
      auto eq = assignment.find('=');
      unit.environment[assignment.substr(0, eq)] = assignment.substr(eq + 1);
    } else if (line.rfind("ExecStart=", 0) == 0) {
      unit.exec_start = line.substr(10);
    }
  }
  return unit;
}

std::vector<std::string> split(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

/// systemd's expansion of ExecStart=: %i the instance, $VAR split at spaces, ${VAR} one word.
std::vector<std::string> command_line(const Unit& unit, const std::string& instance,
                                      const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv;
  for (auto& word : split(unit.exec_start)) {
    if (word == "%i")
      argv.push_back(instance);
    else if (word.rfind("${", 0) == 0)
      argv.push_back(env.at(word.substr(2, word.size() - 3)));
    else if (word.front() == '$')
      for (auto& part : split(env.at(word.substr(1)))) argv.push_back(part);
    else
      argv.push_back(word);
  }
  argv.front() = DBLOCK_CLI_PATH;  // the unit names the installed path; this build's CLI is the same program
  return argv;
}

class ScheduledUnit : public ::testing::TestWithParam<dblock::test::BackendCase> {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_BACKEND_DSN(dsn_, GetParam());
    // Not migrated: on a server, the unit's hosts expect `dblock migrate up` at deployment (below).
    installation_ = std::make_unique<dblock::test::Installation>(GetParam(), dsn_,
                                                                 dblock::test::InstallationSetup{.migrated = false});
    dsn_ = installation_->dsn();
    dir_ = fmt::format("/tmp/dblock-occurrence-{}-{}", getpid(), GetParam().label);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    // The job: a script (NAME.env's DBLOCK_JOB is split at spaces), 0.1 s long, exiting $JOB_EXIT.
    job_ = dir_ + "/job.sh";
    std::ofstream(job_) << "#!/bin/sh\necho \"$DBLOCK_FENCING_TOKEN\" >> " << dir_
                        << "/runs.log\nsleep 0.1\nexit \"${JOB_EXIT:-0}\"\n";
    std::filesystem::permissions(job_, std::filesystem::perms::owner_all);
    unit_ = read_unit(DBLOCK_RUN_UNIT_PATH);
    store_ = installation_->store();
    if (GetParam().dsn_env != nullptr) {
      int status = run_cli({DBLOCK_CLI_PATH, "migrate", "up", "--dsn", dsn_});
      ASSERT_EQ(status, 0);
    }
  }
  void TearDown() override {
    store_.reset();
    installation_.reset();
    std::filesystem::remove_all(dir_);
    dblock::test::remove_embedded_sqlite();
  }

  static int run_cli(std::vector<std::string> argv) {
    return dblock::test::run_command(std::move(argv), {.output = "/dev/null", .append = true}).exit_code;
  }

  /// `argv` with `env` set, its stdout and stderr appended to `out`.
  static dblock::test::ChildProcess start(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                                          const std::string& out) {
    std::vector<std::string> entries;
    for (auto& [key, value] : env) entries.push_back(key + "=" + value);
    return dblock::test::ChildProcess(std::move(argv), {.env = entries, .output = out, .append = true});
  }

  /// One simulated host firing the unit: its own state directory, the shared DSN, NAME.env.
  dblock::test::ChildProcess fire(int host, const std::string& name, int job_exit) {
    auto env = unit_.environment;
    env["DBLOCK_STATE_DIR"] = fmt::format("{}/host{}", dir_, host);
    env["DBLOCK_DSN"] = dsn_;  // /etc/dblock/dblock.env
    env["DBLOCK_JOB"] = job_;  // /etc/dblock/run/NAME.env
    env["DBLOCK_ONCE_PER"] = fmt::format("{}s", kPeriod.count());
    env["JOB_EXIT"] = std::to_string(job_exit);
    return start(command_line(unit_, name, env), env, fmt::format("{}/host{}.out", dir_, host));
  }

  static int exit_of(dblock::test::ChildProcess process) { return process.finish().exit_code; }

  /// The grant of every run of the job so far, one line each.
  std::vector<std::string> run_tokens() {
    std::ifstream in(dir_ + "/runs.log");
    std::vector<std::string> tokens;
    for (std::string line; std::getline(in, line);) tokens.push_back(line);
    return tokens;
  }

  /// Polls the database's clock until the occurrence changes: the timer's scheduled instant, less
  /// the tolerance (the earliest a host with a clock running ahead may fire for it).
  void await_next_occurrence() {
    dblock::OccurrenceOptions options{.period = kPeriod};
    auto first = dblock::occurrence_key(*store_, options);
    auto until = std::chrono::steady_clock::now() + kPeriod + 2s;
    while (dblock::occurrence_key(*store_, options) == first) {
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "the database clock did not move on";
      std::this_thread::sleep_for(20ms);
    }
  }

  std::string output(int host) {
    std::ifstream in(fmt::format("{}/host{}.out", dir_, host));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string dsn_, dir_, job_;
  std::unique_ptr<dblock::test::Installation> installation_;
  Unit unit_;
  std::shared_ptr<dblock::Store> store_;
};

/// The runs' tokens (runs.log, one line a run) against the records: every run claimed a record of
/// its own, so no occurrence ran twice whichever occurrences the hosts' claims fell in.
void expect_one_run_per_record(const std::vector<std::string>& run_tokens,
                               const std::vector<dblock::OccurrenceInfo>& records) {
  std::set<std::string> recorded;
  for (auto& record : records) recorded.insert(std::to_string(record.token));
  std::set<std::string> distinct(run_tokens.begin(), run_tokens.end());
  EXPECT_EQ(run_tokens.size(), records.size()) << "an occurrence ran more than once, or a run left no record";
  EXPECT_EQ(distinct, recorded) << "a run's grant is not the one its occurrence recorded";
}

// The hosts fire at the spread the timer gives them; a loaded machine may start one so late that
// its claim falls in the next occurrence. That is no defect: the checks are per occurrence (each ran
// once), and a phase whose hosts did not meet in one occurrence is tried again in the next.
TEST_P(ScheduledUnit, RunsEachOccurrenceOnceAcrossHostsAndRecordsAFailedOne) {
  ASSERT_NE(unit_.exec_start.find("--once-per"), std::string::npos) << unit_.exec_start;
  const std::string name = "nightly-report";
  constexpr int kTries = 3;
  int host = 0;

  // Three hosts 0.45 s apart (the timer's AccuracySec spread), a fourth catching up 4 s later:
  // one runs, the others find the occurrence done (exit 75).
  int refused_done = 0;
  for (int attempt = 0; attempt < kTries && refused_done == 0; ++attempt) {
    await_next_occurrence();
    auto started = std::chrono::steady_clock::now();
    std::vector<dblock::test::ChildProcess> hosts;
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_until(started + i * 450ms);  // the schedule under test, not synchronisation
      hosts.push_back(fire(host++, name, 0));
    }
    std::vector<int> exits;
    for (auto& process : hosts) exits.push_back(exit_of(std::move(process)));
    std::this_thread::sleep_until(started + 4s);
    exits.push_back(exit_of(fire(host++, name, 0)));
    for (int code : exits) EXPECT_TRUE(code == 0 || code == 75) << "exit " << code;
    refused_done += static_cast<int>(std::count(exits.begin(), exits.end(), 75));
  }
  EXPECT_GT(refused_done, 0) << "no host met another in one occurrence in " << kTries << " tries";
  auto before_failure = dblock::occurrences(*store_).size();

  // An occurrence whose job fails on the first host: by the default rule (no retry within the
  // occurrence) the next host exits 75 and the record says failed.
  bool refused_failed = false;
  for (int attempt = 0; attempt < kTries && !refused_failed; ++attempt) {
    await_next_occurrence();
    auto started = std::chrono::steady_clock::now();
    int failing = host++;
    EXPECT_EQ(exit_of(fire(failing, name, 3)), 3) << output(failing);
    std::this_thread::sleep_until(started + 450ms);
    int next = host++;
    int code = exit_of(fire(next, name, 0));
    EXPECT_TRUE(code == 75 || code == 0) << output(next);
    refused_failed = code == 75 && output(next).find("(failed") != std::string::npos;
  }
  EXPECT_TRUE(refused_failed) << "no host met the failed occurrence in " << kTries << " tries";

  auto records = dblock::occurrences(*store_);
  expect_one_run_per_record(run_tokens(), records);
  ASSERT_GE(records.size(), before_failure + 1);
  // Ordered by occurrence: the first is the first phase's, done; the last, the failed one.
  EXPECT_EQ(records.front().status, dblock::OccurrenceStatus::succeeded);
  EXPECT_EQ(records.back().status, dblock::OccurrenceStatus::failed);
  EXPECT_EQ(records.back().exit_code, 3);
  EXPECT_LT(records.front().occurrence, records.back().occurrence);

  // `dblock locks` shows the records, as text rows and as JSON entries of kind "occurrence".
  auto listed = [&](std::vector<std::string> extra, int slot) {
    std::vector<std::string> argv{DBLOCK_CLI_PATH, "locks", "--dsn", dsn_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    EXPECT_EQ(exit_of(start(argv, {}, fmt::format("{}/host{}.out", dir_, slot))), 0);
    return output(slot);
  };
  auto text = listed({}, 100);
  EXPECT_NE(text.find("succeeded"), std::string::npos) << text;
  EXPECT_NE(text.find(records.back().occurrence), std::string::npos) << text;
  auto json = listed({"--json"}, 101);
  EXPECT_NE(json.find(R"("kind":"occurrence")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("status":"failed","attempts":1,"exit_code":3)"), std::string::npos) << json;
}

INSTANTIATE_TEST_SUITE_P(Backends, ScheduledUnit,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable, dblock::test::kSqlite})),
                         [](const auto& info) { return std::string(info.param.label); });

// The record's life through the library: a holder dying mid-run leaves it abandoned, which is not
// run again by default and is with retry_failed; the reaper clears records kept long enough, but
// never one still running under a live lease.
class OccurrenceRecords : public ::testing::TestWithParam<dblock::test::BackendCase> {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_BACKEND_DSN(dsn_, GetParam());
    installation_ = std::make_unique<dblock::test::Installation>(GetParam(), dsn_);
    store_ = installation_->store();
  }
  void TearDown() override {
    store_.reset();
    installation_.reset();
    dblock::test::remove_embedded_sqlite();
  }
  std::optional<dblock::OccurrenceInfo> record(const std::string& key) {
    for (auto& row : dblock::occurrences(*store_))
      if (row.occurrence == key) return row;
    return std::nullopt;
  }
  std::string dsn_;
  std::unique_ptr<dblock::test::Installation> installation_;
  std::shared_ptr<dblock::Store> store_;
};

TEST_P(OccurrenceRecords, AbandonedRunsFollowTheRetryRuleAndTheReaperClearsOldRecords) {
  dblock::LockManager first(store_), second(store_);
  auto lock = first.try_acquire("job");
  ASSERT_TRUE(lock);
  auto run = dblock::Occurrence::claim(store_, *lock, {.key = "k1"});
  ASSERT_TRUE(run.claimed());
  lock->release();  // the holder's lease ends mid-run: its record is abandoned
  ASSERT_EQ(record("k1")->status, dblock::OccurrenceStatus::abandoned);

  auto next = second.try_acquire("job");
  ASSERT_TRUE(next);
  auto refused = dblock::Occurrence::claim(store_, *next, {.key = "k1"});
  EXPECT_FALSE(refused.claimed());
  ASSERT_TRUE(refused.existing());
  EXPECT_EQ(refused.existing()->status, dblock::OccurrenceStatus::abandoned);
  auto retried = dblock::Occurrence::claim(store_, *next, {.key = "k1", .retry_failed = true});
  ASSERT_TRUE(retried.claimed());
  EXPECT_FALSE(run.finish(0)) << "the abandoned run must not overwrite the retry's record";
  EXPECT_TRUE(retried.finish(0));
  EXPECT_EQ(record("k1")->status, dblock::OccurrenceStatus::succeeded);
  EXPECT_EQ(record("k1")->attempts, 2);
  EXPECT_FALSE(dblock::Occurrence::claim(store_, *next, {.key = "k1", .retry_failed = true}).claimed())
      << "a succeeded occurrence never runs again";

  // Kept 1 ms: due for the reaper at once, except the one still running under a live lease.
  auto done = dblock::Occurrence::claim(store_, *next, {.key = "k2", .keep = 1ms});
  ASSERT_TRUE(done.claimed());
  done.finish(0);
  auto running = dblock::Occurrence::claim(store_, *next, {.key = "k3", .keep = 1ms});
  ASSERT_TRUE(running.claimed());
  // A second claim under the same grant (another thread of one owner, a re-entry) while it runs.
  auto again = dblock::Occurrence::claim(store_, *next, {.key = "k3", .keep = 1ms});
  EXPECT_FALSE(again.claimed()) << "an occurrence still running was claimed a second time";
  EXPECT_FALSE(dblock::Occurrence::claim(store_, *next, {.key = "k3", .retry_failed = true}).claimed());
  dblock::Reaper reaper(store_);
  auto until = std::chrono::steady_clock::now() + 5s;
  while (record("k2") && std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(reaper.run_once().ok);
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(record("k2")) << "the reaper left a record past its keep";
  EXPECT_TRUE(record("k3")) << "the reaper deleted a record still running under a live lease";
  EXPECT_TRUE(record("k1")) << "the reaper deleted a record kept for 7 days";
}

// A claim needs the grant the fence would accept: a revoked one (or one past its lease but inside
// its lock-delay) used to claim, and then its run was killed and recorded failed, so no host ran it.
TEST_P(OccurrenceRecords, ARevokedGrantClaimsNothing) {
  dblock::LockManager holder(store_);
  auto lock = holder.try_acquire("job/revoked");
  ASSERT_TRUE(lock);
  ASSERT_TRUE(store_->revoke("job/revoked"));
  EXPECT_FALSE(dblock::Occurrence::claim(store_, *lock, {.key = "r1"}).claimed());
  EXPECT_FALSE(record("r1")) << "a revoked grant claimed an occurrence";
}

INSTANTIATE_TEST_SUITE_P(Backends, OccurrenceRecords,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable, dblock::test::kGaleraTable,
                                                                  dblock::test::kSqlite})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
