// The nemesis suite, the way Jepsen checks lock services. Holders in this process (threads, two of
// them sharing one manager, two more sharing one owner so that they re-enter each other's locks
// while releases race; guards are released on other threads too; two more wait in the fair queue,
// as rows that the last release hands the name to, in table mode) and in child processes (`dblock
// run` wrappers whose command records its work) contend for two hot names, while a nemesis stalls
// their connections (packets held, no reset) for longer than the TTL, cuts them, SIGKILLs wrappers
// or their guard process alone, pauses wrappers (SIGSTOP) past their deadline, revokes
// holders as `dblock release --force` does and asks them to let go as `dblock release --ask` does
// (table mode: an asked thread ends its work and releases; a wrapper sends its command SIGTERM; every
// other wrapper's round waits in the fair queue with `run --fair`). Every holder records
// its belief interval (first to last instant it worked believing it held the lock, on this machine's monotonic clock)
// and its fencing token. The checker fails on any overlap of two intervals for one name, and on any token that does not
// rise in grant order. A second run does the same with groups: permit holders of a semaphore of two, and readers and
// writers of a read-write lock; there the checker fails on more than two permit holders at once, on a writer beside
// anyone, and on a later grant with a smaller token.
//
// DBLOCK_NEMESIS_SECONDS sets the length of each run (default 8). A run that finds a violation keeps
// its folder (the wrappers' logs, their commands' records, and <loop>.events: what the nemesis did
// to each wrapper and its guard, on CLOCK_MONOTONIC); DBLOCK_NEMESIS_KEEP=1 keeps it always.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include <dblock/dblock.hpp>
#if DBLOCK_TEST_WITH_ASIO
#include <dblock/asio.hpp>
#endif
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backends/backend.hpp"
#include "base/scope_exit.hpp"
#include "core/store_parts.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"
#include "support/tcp_proxy.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using dblock::test::BackendCase;

constexpr auto kTtl = 600ms;
/// How long a holder works: often past the TTL, so that a fault meets a holder still at work.
std::chrono::milliseconds work_time(std::mt19937& random) { return std::chrono::milliseconds(20 + random() % 1500); }
const std::vector<std::string> kNames{"hot-a", "hot-b"};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::chrono::seconds run_length() {
  const char* text = std::getenv("DBLOCK_NEMESIS_SECONDS");
  return std::chrono::seconds(text != nullptr && std::atoi(text) > 0 ? std::atoi(text) : 8);
}

struct Belief {
  std::string name;
  std::int64_t token = 0;
  std::int64_t first_ns = 0, last_ns = 0;
  std::string holder;
  dblock::HolderKind kind = dblock::HolderKind::exclusive;
  /// Threads of one owner (OwnerScope::manager) re-enter each other's locks: their beliefs may
  /// overlap, with one token. Empty: the holder is an owner of its own, all its life.
  std::string owner;

  [[nodiscard]] const std::string& owner_or_holder() const { return owner.empty() ? holder : owner; }
  /// In-process holders: each time the guard's local deadline moved, (when it was seen, the new
  /// deadline), both in steady-clock ns; printed with a violation to say which deadline was believed.
  std::vector<std::pair<std::int64_t, std::int64_t>> deadlines;
  /// CLI holders: what the nemesis did to the wrapper and its guard meanwhile (steady-clock ns, what),
  /// and how long a killed guard took to end; printed with a violation.
  std::vector<std::pair<std::int64_t, std::string>> faults;
};

std::string deadline_trace(const Belief& belief, std::int64_t origin_ns) {
  std::string text;
  for (auto& [seen, deadline] : belief.deadlines)
    text +=
        fmt::format(" [seen {:+.1f} ms: deadline {:+.1f} ms]", (seen - origin_ns) / 1e6, (deadline - origin_ns) / 1e6);
  if (!text.empty()) return text;
  text = " (no deadline trace: a CLI holder";
  if (!belief.faults.empty()) text += "; what the nemesis did to its wrapper:";
  for (auto& [at, what] : belief.faults) text += fmt::format(" [{:+.1f} ms: {}]", (at - origin_ns) / 1e6, what);
  return text + ")";
}

/// What the holders take: plain locks of two hot names, or groups: permits of "sem" (a semaphore
/// of kPermits) and readers and writers of "rw".
enum class Workload { locks, groups };
constexpr std::int64_t kPermits = 2;

/// One acquisition's name and kind, as the library and the CLI ask for it.
struct Take {
  std::string name;
  dblock::HolderKind kind = dblock::HolderKind::exclusive;

  [[nodiscard]] dblock::LockOptions options() const {
    return {.shared = kind == dblock::HolderKind::shared, .permits = kind == dblock::HolderKind::permit ? kPermits : 0};
  }
  [[nodiscard]] std::vector<std::string> cli_flags() const {
    if (kind == dblock::HolderKind::permit) return {"--permits", std::to_string(kPermits)};
    if (kind == dblock::HolderKind::shared) return {"--shared"};
    return {};
  }
};

Take pick(Workload workload, std::mt19937& random) {
  if (workload == Workload::locks) return {kNames[random() % kNames.size()]};
  switch (random() % 5) {
    case 0:
    case 1:
      return {"sem", dblock::HolderKind::permit};
    case 2:
      return {"rw", dblock::HolderKind::exclusive};
    default:
      return {"rw", dblock::HolderKind::shared};
  }
}

constexpr std::size_t kEnoughBeliefs = 8;

/// The database's clock against this machine's steady clock, sampled through the test's admin while
/// the holders work. Leases end by the database's clock and beliefs by the steady clock: the library
/// assumes that the two run at one rate (within its clock allowance), and a step of the database's
/// clock (its host's wall clock set forward) ends every lease early by that much, unseen by any
/// client. The summary goes with every run and every overlap, so that an overlap says whether the
/// clocks kept together meanwhile.
class DatabaseClockWatch {
 public:
  DatabaseClockWatch(dblock::test::Admin& admin, std::string_view dialect) : admin_(admin), sql_(now_sql(dialect)) {
    thread_ = std::jthread([this](std::stop_token stop) {
      while (!stop.stop_requested()) {
        sample();
        std::this_thread::sleep_for(25ms);  // the sampling pace
      }
    });
  }
  /// Stops sampling; what it saw: how far the database's clock moved against the steady clock
  /// from the first sample, and the largest move between two samples in a row.
  std::string stop_and_summarize() {
    thread_ = {};  // joins
    if (samples_ < 2) return fmt::format("database clock: {} usable sample(s), drift unknown", samples_);
    return fmt::format(
        "database clock against the steady clock: drift {:+.1f} to {:+.1f} ms, largest move between samples "
        "{:+.1f} ms at +{:.1f} s ({} samples, each within {:.1f} ms)",
        low_ns_ / 1e6, high_ns_ / 1e6, jump_ns_ / 1e6, (jump_at_ns_ - first_at_ns_) / 1e9, samples_,
        kPrecisionNs / 1e6);
  }

 private:
  /// Answers slower than this say too little about the instant the clock was read.
  static constexpr std::int64_t kPrecisionNs = 4'000'000;

  static std::string now_sql(std::string_view dialect) {
    if (dialect == "postgresql") return "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint";
    if (dialect == "mysql") return "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
    // SQLite's time is the process's wall clock, read as the backend reads it (sqlite_sql.hpp).
    return "SELECT (CAST(strftime('%s','now') AS INTEGER) * 1000 + CAST(substr(strftime('%f','now'), 4) AS INTEGER)) "
           "* 1000";
  }

  void sample() {
    auto before = now_ns();
    std::vector<std::string> rows;
    try {
      rows = admin_.query(sql_);
    } catch (const std::exception&) {
      return;  // the admin's own connection failed: one sample fewer
    }
    auto after = now_ns();
    if (rows.empty() || after - before > kPrecisionNs) return;
    std::int64_t offset = std::stoll(rows.front()) * 1000 - (before + after) / 2;
    if (samples_++ == 0) {
      first_ns_ = last_ns_ = offset;
      first_at_ns_ = jump_at_ns_ = before;
      return;
    }
    low_ns_ = std::min(low_ns_, offset - first_ns_);
    high_ns_ = std::max(high_ns_, offset - first_ns_);
    if (std::abs(offset - last_ns_) > std::abs(jump_ns_)) {
      jump_ns_ = offset - last_ns_;
      jump_at_ns_ = before;
    }
    last_ns_ = offset;
  }

  dblock::test::Admin& admin_;
  std::string sql_;
  // Written by the sampling thread only, read once it has been joined.
  int samples_ = 0;
  std::int64_t first_ns_ = 0, last_ns_ = 0, low_ns_ = 0, high_ns_ = 0, jump_ns_ = 0;
  std::int64_t first_at_ns_ = 0, jump_at_ns_ = 0;
  std::jthread thread_;  // last: starts once the rest is there
};

/// How many of `beliefs` are of holders whose label begins with `prefix`.
std::size_t beliefs_of_holders(const std::vector<Belief>& beliefs, std::string_view prefix) {
  return static_cast<std::size_t>(
      std::count_if(beliefs.begin(), beliefs.end(), [&](const Belief& b) { return b.holder.starts_with(prefix); }));
}

class History {
 public:
  void add(Belief belief) {
    std::lock_guard lock(mutex_);
    beliefs_.push_back(std::move(belief));
  }
  std::vector<Belief> take() {
    std::lock_guard lock(mutex_);
    return std::move(beliefs_);
  }
  std::size_t size() {
    std::lock_guard lock(mutex_);
    return beliefs_.size();
  }
  /// How many beliefs so far are of holders whose label begins with `prefix`.
  std::size_t of_holders(std::string_view prefix) {
    std::lock_guard lock(mutex_);
    return beliefs_of_holders(beliefs_, prefix);
  }

 private:
  std::mutex mutex_;
  std::vector<Belief> beliefs_;
};

/// A `dblock run` command whose guard was SIGKILLed while its wrapper was paused has nothing left
/// to kill it but PR_SET_PDEATHSIG, which the kernel sends only once the guard's exit is complete:
/// on a loaded host that took seconds (doc/guarantees.md). Such a command is judged by what the
/// product promises there: it believed no longer than the guard's KILL (the belief is cut there),
/// and it worked no later than the guard's end, seen by the nemesis. Any other case stays strict.
/// Returns the commands that worked past their guard's end.
std::vector<std::string> cut_at_a_frozen_wrappers_guard_kill(std::vector<Belief>& beliefs) {
  std::vector<std::string> found;
  for (auto& belief : beliefs) {
    bool frozen = false;
    std::optional<std::int64_t> guard_killed_ns;
    // When the nemesis saw the guard gone. Each KILL has a watch of its own (a zombie guard may be
    // killed again), and a later KILL's watch may note the end first, with its own "ms after": so the
    // end is when the first note was written, not what it counts from.
    std::optional<std::int64_t> guard_end_ns;
    for (auto& [at, what] : belief.faults) {
      if (what.starts_with("STOP to wrapper"))
        frozen = true;
      else if (what.starts_with("CONT to wrapper"))
        frozen = false;
      else if (what.starts_with("KILL to guard") && frozen && !guard_killed_ns)
        guard_killed_ns = at;
      else if (guard_killed_ns && !guard_end_ns && what.starts_with("guard ") &&
               what.find(" ended ") != std::string::npos)
        guard_end_ns = at;
    }
    if (!guard_killed_ns || belief.last_ns <= *guard_killed_ns) continue;
    // The nemesis sees the guard gone a moment after the kernel sent the command its SIGKILL, which
    // ends the command at its next entry into the kernel (an interrupt, at the latest): the command may
    // have read the clock for one more step in that moment.
    constexpr std::int64_t kKillInFlightNs = 5'000'000;
    if (guard_end_ns && belief.last_ns > *guard_end_ns + kKillInFlightNs)
      found.push_back(fmt::format("'{}': {} (token {}) worked {:.3f} ms past the end of its guard{}", belief.name,
                                  belief.holder, belief.token, (belief.last_ns - *guard_end_ns) / 1e6,
                                  deadline_trace(belief, *guard_killed_ns)));
    belief.last_ns = *guard_killed_ns;
  }
  return found;
}

/// Beliefs that break exclusion or token order, one line each. Two beliefs of one name may overlap
/// only when both are readers, or both permit holders with at most kPermits at any instant. A
/// belief that begins after another ended has a larger token, unless both are members of groups:
/// every membership has a token of its own, drawn when it begins, which two owners never share, and
/// a reader's membership taken afresh by its owner while its row lives (its last release's reply was
/// lost, and the row lapses with its lease) keeps its token: a later reader of the same group may
/// have drawn a larger one, so members' beliefs are not in token order, and one owner's successive
/// reader beliefs may have one token.
std::vector<std::string> violations(std::vector<Belief> beliefs) {
  using dblock::HolderKind;
  std::vector<std::string> found = cut_at_a_frozen_wrappers_guard_kill(beliefs);
  std::sort(beliefs.begin(), beliefs.end(), [](const Belief& a, const Belief& b) {
    return std::tie(a.name, a.first_ns) < std::tie(b.name, b.first_ns);
  });
  for (std::size_t i = 0; i < beliefs.size(); ++i) {
    const auto& earlier = beliefs[i];
    int permits_at_start = 1;  // permit holders believing at `later.first_ns`, `later` included
    for (std::size_t j = i + 1; j < beliefs.size() && beliefs[j].name == earlier.name; ++j) {
      const auto& later = beliefs[j];
      bool one_owner = !earlier.owner.empty() && earlier.owner == later.owner && earlier.token == later.token;
      if (earlier.kind == later.kind && earlier.kind != HolderKind::exclusive) {
        // Both may hold at once, so their grant order is not the order of their beliefs: each
        // membership has a token of its own (the conformance suite checks that they rise).
        bool kept_reader_token =
            earlier.kind == HolderKind::shared && earlier.owner_or_holder() == later.owner_or_holder();
        if (later.token == earlier.token && !one_owner && !kept_reader_token)
          found.push_back(fmt::format("'{}': {} and {} are members with one token {}", later.name, earlier.holder,
                                      later.holder, later.token));
        continue;
      }
      if (later.first_ns <= earlier.last_ns) {
        bool may_share = one_owner || (earlier.kind == later.kind && earlier.kind != HolderKind::exclusive);
        if (!may_share)
          found.push_back(fmt::format(
              "'{}': {} (token {}) began {:.3f} ms before {} (token {}) stopped; times from the later's start: the "
              "earlier's deadlines{}; the later's{}",
              later.name, later.holder, later.token, (earlier.last_ns - later.first_ns) / 1e6, earlier.holder,
              earlier.token, deadline_trace(earlier, later.first_ns), deadline_trace(later, later.first_ns)));
        continue;
      }
      // The same grant believed again by its owner, after the first belief ended: a lost-reply
      // acquisition's read adopts the owner's earlier lease, left live by a release that never went
      // out (doc/semantics.md, "Outcome unknown"); nobody else held the name in between.
      bool adopted_again = earlier.owner_or_holder() == later.owner_or_holder() && earlier.token == later.token;
      if (one_owner || adopted_again ? later.token < earlier.token : later.token <= earlier.token)
        found.push_back(fmt::format("'{}': token {} of {} was granted after token {} of {} ended", later.name,
                                    later.token, later.holder, earlier.token, earlier.holder));
    }
    if (earlier.kind != HolderKind::permit) continue;
    std::string others;  // the other permit holders believing then, with their intervals from this start
    for (std::size_t j = 0; j < i; ++j)
      if (beliefs[j].name == earlier.name && beliefs[j].kind == HolderKind::permit &&
          beliefs[j].last_ns >= earlier.first_ns) {
        ++permits_at_start;
        others +=
            fmt::format("; {} (token {}) believed from {:+.3f} to {:+.3f} ms{}", beliefs[j].holder, beliefs[j].token,
                        (beliefs[j].first_ns - earlier.first_ns) / 1e6, (beliefs[j].last_ns - earlier.first_ns) / 1e6,
                        deadline_trace(beliefs[j], earlier.first_ns));
      }
    if (permits_at_start > kPermits)
      found.push_back(fmt::format("'{}': {} permit holders at once when {} (token {}) began{}", earlier.name,
                                  permits_at_start, earlier.holder, earlier.token, others));
  }
  return found;
}

/// One `dblock run` holder at a time, spawned over and over until told to stop.
class RunLoop {
 public:
  RunLoop(std::string dsn, dblock::LockMode mode, Workload workload, std::filesystem::path dir, std::string label)
      : dsn_(std::move(dsn)), mode_(mode), workload_(workload), dir_(std::move(dir)), label_(std::move(label)) {}

  void run(const std::atomic<bool>& stop, std::uint32_t seed) {
    std::mt19937 random(seed);
    for (int round = 0; !stop; ++round) {
      auto record = dir_ / fmt::format("{}-{}.rec", label_, round);
      auto take = pick(workload_, random);
      std::vector<std::string> args{DBLOCK_CLI_PATH, "--dsn",   dsn_,    "run",
                                    "--name",        take.name, "--ttl", fmt::format("{}ms", kTtl.count()),
                                    "--wait",        "1s"};
      if (mode_ == dblock::LockMode::advisory) args.insert(args.end(), {"--mode", "advisory"});
      for (auto& flag : take.cli_flags()) args.push_back(flag);
      if (mode_ == dblock::LockMode::table && take.kind == dblock::HolderKind::exclusive) {
        args.insert(args.end(), {"--ask-signal", "TERM"});  // asked to let go: the command ends
        // Every other round waits in the fair queue: a wrapper killed or paused while queued leaves
        // a waiter row that lapses, and a grant handed to it meets the nemesis too.
        if (round % 2 == 1) args.emplace_back("--fair");
      }
      args.insert(args.end(), {"--", NEMESIS_WORKER_PATH, record.string(), std::to_string(work_time(random).count())});
      // Its stdout and stderr appended to the loop's log.
      dblock::test::ChildProcess holder(std::move(args),
                                        {.output = (dir_ / (label_ + ".log")).string(), .append = true});
      if (holder.pid() <= 0) {
        ADD_FAILURE() << holder.output();
        return;
      }
      {
        std::lock_guard lock(mutex_);
        running_ = holder.pid();
        record_ = record;
        faults_.clear();
        round_ = round;
        note(fmt::format("round {}: wrapper {} spawned for '{}'", round, holder.pid(), take.name));
      }
      auto pid = holder.pid();
      // Past the bound it is killed (continued first: the nemesis may have paused it) when `holder` goes.
      auto outcome = holder.wait_for(60s);
      if (!outcome) ADD_FAILURE() << label_ << ": a dblock run did not finish within 60 s";
      {
        std::lock_guard lock(mutex_);
        running_ = 0;
        note(outcome ? fmt::format("round {}: wrapper {} reaped, exit code {}", round, pid, outcome->exit_code)
                     : fmt::format("round {}: wrapper {} still running after 60 s", round, pid));
        records_.push_back({take, record, fmt::format("{} round {}", label_, round), std::move(faults_)});
        faults_.clear();
        round_ = -1;
      }
    }
  }

  /// The beliefs of every command run, read once each command is gone: a command orphaned by a
  /// killed wrapper may have worked on after it.
  void collect(History& history) {
    guard_watches_.clear();  // joins: each has seen its guard end, or given up
    for (auto& [take, record, holder, faults] : records_) {
      std::ifstream in(record, std::ios::binary);
      std::int64_t fields[4] = {};
      if (!in.read(reinterpret_cast<char*>(fields), sizeof fields)) continue;
      auto pid = static_cast<pid_t>(fields[3]);
      auto give_up = Clock::now() + 10s;
      while (kill(pid, 0) == 0 && Clock::now() < give_up)
        std::this_thread::sleep_for(5ms);  // polling a stranger's exit
      in.seekg(0);
      in.read(reinterpret_cast<char*>(fields), sizeof fields);
      Belief belief{take.name, fields[0], fields[1], fields[2], holder, take.kind};
      belief.faults = faults;
      history.add(std::move(belief));
    }
  }

  /// Sends `signal_number` to the wrapper running now, if any; true when one was there.
  bool signal(int signal_number) {
    std::lock_guard lock(mutex_);
    bool sent = running_ != 0 && kill(running_, signal_number) == 0;
    if (sent) note(fmt::format("{} to wrapper {}", sigabbrev_np(signal_number), running_));
    return sent;
  }
  bool at_work() {
    std::lock_guard lock(mutex_);
    return running_ != 0 && std::filesystem::exists(record_);
  }
  /// SIGKILLs the guard (the wrapper's child that leads the command's process group) while the
  /// command is at work; true when there was one.
  bool kill_guard_at_work() {
    std::lock_guard lock(mutex_);
    if (running_ == 0 || !std::filesystem::exists(record_)) return false;
    std::ifstream children(fmt::format("/proc/{}/task/{}/children", running_, running_));
    pid_t guard = 0;
    if (!(children >> guard && guard > 0 && kill(guard, SIGKILL) == 0)) return false;
    note(fmt::format("KILL to guard {} of wrapper {}", guard, running_));
    watch_guard(guard);
    return true;
  }
  /// The same, only while its command is at work (holding the lock): the faults that matter.
  bool signal_at_work(int signal_number) { return signal_at_work_pid(signal_number) != 0; }
  /// signal_at_work, saying which wrapper got it (0: none).
  pid_t signal_at_work_pid(int signal_number) {
    std::lock_guard lock(mutex_);
    bool sent = running_ != 0 && std::filesystem::exists(record_) && kill(running_, signal_number) == 0;
    if (sent) note(fmt::format("{} to wrapper {} at work", sigabbrev_np(signal_number), running_));
    return sent ? running_ : 0;
  }
  /// Continues `paused` if it still runs; never a later wrapper, which the pause was not for. (ASan
  /// builds: a wrapper ending runs LeakSanitizer's stop-the-world, which ptrace-stops its threads;
  /// loaded runs saw wrappers that had got such a stray SIGCONT sit in ptrace stops after their
  /// last line until the 60 s give-up below.)
  void resume(pid_t paused) {
    std::lock_guard lock(mutex_);
    if (running_ == paused && kill(paused, SIGCONT) == 0) note(fmt::format("CONT to wrapper {}", paused));
  }

 private:
  /// Records what happened to the running wrapper, in the round's faults and in <label>.events.
  /// Called with mutex_ held.
  void note(const std::string& what) {
    auto at = now_ns();
    faults_.emplace_back(at, what);
    std::ofstream(dir_ / (label_ + ".events"), std::ios::app) << at << " " << what << "\n";
  }

  /// How long a SIGKILLed guard takes to end: its command dies of PR_SET_PDEATHSIG only then, and a
  /// loaded machine kept one in exit_mmap (free_pgtables, waiting for a mapped file's lock) for
  /// over a second while its command worked on. Noted when it ended, or its kernel stack after 2 s.
  void watch_guard(pid_t guard) {
    auto killed_ns = now_ns();
    guard_watches_.emplace_back([this, guard, killed_ns, round = round_] {
      auto read = [](const std::string& path) {
        std::ifstream in(path);
        return std::string(std::istreambuf_iterator<char>(in), {});
      };
      std::string state, stack;
      while (now_ns() - killed_ns < 2'000'000'000) {
        auto stat = read(fmt::format("/proc/{}/stat", guard));
        auto end_of_name = stat.rfind(") ");
        state = end_of_name == std::string::npos ? "gone" : stat.substr(end_of_name + 2, 1);
        if (state == "gone" || state == "Z") break;
        stack = read(fmt::format("/proc/{}/stack", guard));
        std::this_thread::sleep_for(1ms);  // polling a stranger's end
      }
      std::string what =
          state == "gone" || state == "Z"
              ? fmt::format("guard {} ended {:.1f} ms after its KILL", guard, (now_ns() - killed_ns) / 1e6)
              : fmt::format("guard {} still {} 2 s after its KILL, in [{}]", guard, state, stack);
      std::lock_guard lock(mutex_);
      if (round == round_) {
        note(what);
      } else {  // its round has ended (records_ holds one entry per round, in order)
        records_[static_cast<std::size_t>(round)].faults.emplace_back(now_ns(), what);
        std::ofstream(dir_ / (label_ + ".events"), std::ios::app) << now_ns() << " " << what << "\n";
      }
    });
  }

  std::string dsn_;
  dblock::LockMode mode_;
  Workload workload_;
  std::filesystem::path dir_;
  std::string label_;
  std::mutex mutex_;
  pid_t running_ = 0;
  std::filesystem::path record_;                              // of the wrapper running now
  std::vector<std::pair<std::int64_t, std::string>> faults_;  // of the wrapper running now
  int round_ = -1;                                            // the round running now
  struct Round {
    Take take;
    std::filesystem::path record;
    std::string holder;
    std::vector<std::pair<std::int64_t, std::string>> faults;
  };
  std::vector<Round> records_;
  std::vector<std::jthread> guard_watches_;  // last: joined first
};

/// A holder thread: takes a name, works while lost() is false, records what it believed. Threads
/// given one `owner` share a manager with OwnerScope::manager: they re-enter each other's locks,
/// and their releases race those re-entries. Every other guard is released on another thread.
/// `fencing`, when given (table mode), is the manager's store: about one grant in three does the
/// first part of its work inside a fenced transaction on it, share-locking the row while the
/// manager renews its other names and others try this one.
void hold_in_thread(dblock::LockManager& manager, Workload workload, const std::atomic<bool>& stop, History& history,
                    std::string label, std::uint32_t seed, std::string owner = {},
                    const std::shared_ptr<dblock::Store>& fencing = nullptr, std::atomic<int>* fences = nullptr) {
  std::mt19937 random(seed);
  while (!stop) {
    auto take = pick(workload, random);
    std::optional<dblock::Lock> lock;
    std::int64_t token = 0;
    try {
      lock.emplace(manager.acquire(take.name, 1s, take.options()));
      token = lock->token();  // advisory mode draws it now, and throws LockLost if the lock is gone meanwhile
    } catch (const dblock::Error&) {
      continue;
    }
    Belief belief{take.name, token, 0, 0, label, take.kind, owner};
    auto work_until = [&](Clock::time_point until) {
      while (Clock::now() < until) {
        auto at = now_ns();
        if (lock->lost()) return;               // checked after `at`: the lock was believed held at `at`
        if (lock->release_requested()) return;  // asked to let go: the work ends here, and the lock goes
        if (belief.first_ns == 0) belief.first_ns = at;
        belief.last_ns = at;
        auto deadline = lock->local_deadline().time_since_epoch().count();
        if (belief.deadlines.empty() || belief.deadlines.back().second != deadline)
          belief.deadlines.emplace_back(at, deadline);
        std::this_thread::sleep_for(1ms);  // the work's own pace
      }
    };
    auto until = Clock::now() + work_time(random);
    if (fencing && random() % 3 == 0) {
      // Well inside the lease: its renewals wait for the fence to end, and the rest is unfenced.
      try {
        fencing->fenced(*lock,
                        [&](dblock::FencedTransaction&) { work_until(std::min(until, Clock::now() + kTtl / 3)); });
        if (fences) ++*fences;
      } catch (const dblock::Error&) {
        // refused (the lock was lost or revoked) or cut off by the nemesis: the work goes on unfenced
      }
    }
    work_until(until);
    if (belief.first_ns != 0) history.add(belief);
    auto release = [](dblock::Lock held) {
      try {
        held.release();
      } catch (const dblock::Error&) {
      }
    };
    if (random() % 2 == 0)
      release(std::move(*lock));
    else
      std::thread(release, std::move(*lock)).join();                         // a guard moved to another thread
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 150));  // other work: others get a turn
  }
}

#if DBLOCK_TEST_WITH_ASIO
/// Asynchronous holders: coroutines of one AsyncLockManager on two threads, each task its own
/// owner (TaskOwner), working under the lock as hold_in_thread does, but waiting on timers.
class AsyncHolders {
 public:
  AsyncHolders(std::shared_ptr<dblock::Store> store, dblock::ManagerOptions options, Workload workload,
               const std::atomic<bool>& stop, History& history)
      : locks_(io_.get_executor(), std::move(store), options, {.threads = 2}) {
    for (std::uint32_t task = 0; task < 3; ++task)
      asio::co_spawn(io_, hold(workload, stop, history, fmt::format("async/task{}", task), 20 + task), asio::detached);
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });
  }
  /// Returns once every task has seen `stop`.
  void join() { threads_.clear(); }

 private:
  asio::awaitable<void> hold(Workload workload, const std::atomic<bool>& stop, History& history, std::string label,
                             std::uint32_t seed) {
    std::mt19937 random(seed);
    dblock::TaskOwner owner;
    asio::steady_timer pace(co_await asio::this_coro::executor);
    while (!stop) {
      auto take = pick(workload, random);
      std::optional<dblock::Lock> lock;
      std::int64_t token = 0;
      try {
        lock.emplace(co_await locks_.async_acquire(take.name, 1s, owner, take.options(), asio::use_awaitable));
        token = lock->token();  // as in hold_in_thread: may throw LockLost
      } catch (const dblock::Error&) {
        continue;
      }
      Belief belief{take.name, token, 0, 0, label, take.kind, {}};
      auto until = Clock::now() + work_time(random);
      while (Clock::now() < until) {
        auto at = now_ns();
        if (lock->lost()) break;
        if (belief.first_ns == 0) belief.first_ns = at;
        belief.last_ns = at;
        pace.expires_after(1ms);  // the work's own pace, on a timer: the thread serves the others
        co_await pace.async_wait(asio::use_awaitable);
      }
      if (belief.first_ns != 0) history.add(belief);
      try {
        co_await locks_.async_release(std::move(*lock), asio::use_awaitable);
      } catch (const dblock::Error&) {
      }
      pace.expires_after(std::chrono::milliseconds(random() % 150));
      co_await pace.async_wait(asio::use_awaitable);
    }
  }

  asio::io_context io_;
  dblock::AsyncLockManager locks_;
  std::vector<std::jthread> threads_;  // last: joined first
};
#endif

class Nemesis : public ::testing::TestWithParam<BackendCase> {
 protected:
  void run(Workload workload);
};
/// Groups: table mode only.
class GroupNemesis : public Nemesis {};

TEST_P(Nemesis, NoTwoHoldersEverBelieveTheyHoldOneNameAtOnce) { run(Workload::locks); }

TEST_P(GroupNemesis, NeverMorePermitHoldersThanPermitsNorAWriterBesideAnyone) { run(Workload::groups); }

void Nemesis::run(Workload workload) {
  std::string server_dsn;
  DBLOCK_REQUIRE_BACKEND_DSN(server_dsn, GetParam());
  bool networked = GetParam().dsn_env != nullptr;
  bool advisory = GetParam().mode == dblock::LockMode::advisory;
  dblock::test::Installation installation(GetParam(), server_dsn, {.keep_store = false});
  auto base = installation.dsn();
  // One per run: a record left by another run (kept with DBLOCK_NEMESIS_KEEP) would be read as a belief.
  auto dir = std::filesystem::temp_directory_path() / fmt::format("dblock-nemesis-{}-{}{}", getpid(), GetParam().label,
                                                                  workload == Workload::groups ? "-groups" : "");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  // Holders 0 and 1 are in-process managers (0 with two threads), 2 and 3 are `dblock run` loops,
  // 4 a fair-queue manager with two threads (table mode); each reaches the
  // server through a proxy of its own.
  constexpr std::size_t kHolders = 5;
  std::vector<std::unique_ptr<dblock::test::TcpProxy>> proxies;
  auto dsn_for = [&](std::size_t holder) {
    return networked ? dblock::test::with_port(base, proxies[holder]->port()) : base;
  };
  // On a cluster, holder i talks to node i (mod the nodes): holders contend across nodes.
  auto nodes = dblock::test::node_dsns(GetParam(), server_dsn);
  if (networked)
    for (std::size_t i = 0; i < kHolders; ++i)
      proxies.push_back(std::make_unique<dblock::test::TcpProxy>(dblock::test::dsn_port(nodes[i % nodes.size()])));

  dblock::StoreOptions store_options{.connect_timeout = 2s, .statement_timeout = 2s};
  // The stores' first connections, before any fault: a loaded machine took longer than the 2 s the
  // holders' reconnections get (set for the stalls below), which failed the run before it began.
  auto open_store = [&](const std::string& dsn) {
    for (int attempt = 1;; ++attempt) {
      try {
        return dblock::Store::open(dsn, store_options);
      } catch (const dblock::ConnectionError&) {
        if (attempt == 5) throw;
      }
    }
  };
  dblock::ManagerOptions manager_options{.mode = GetParam().mode, .default_ttl = kTtl};
  // Two threads on one manager: their releases are written behind one another's.
  auto behind_options = manager_options;
  behind_options.write_behind_releases = true;
  // In advisory mode its two owners share a pool of one session: each lease that finds it dry makes
  // the leasing thread, inside its own owner's statement, give back the other owner's idle session.
  auto shared_store = open_store(advisory ? dsn_for(0) + "&pool=1" : dsn_for(0));
  auto shared_manager = std::make_unique<dblock::LockManager>(shared_store, behind_options);
  auto own_store = open_store(dsn_for(1));
  auto own_manager = std::make_unique<dblock::LockManager>(own_store, manager_options);
  // Table mode: the in-process holders fence some of their work (a fence is a table-mode row's).
  auto fencing_of = [&](const std::shared_ptr<dblock::Store>& store) { return advisory ? nullptr : store; };
  std::atomic<int> fences{0};
  // One owner for two threads (plain locks in table mode: an advisory lock is its session's, one
  // per guard, and a group's re-entered membership is one permit the checker would count twice).
  auto one_owner_options = behind_options;
  one_owner_options.owner_scope = dblock::OwnerScope::manager;
  auto one_owner_manager = advisory || workload != Workload::locks
                               ? nullptr
                               : std::make_unique<dblock::LockManager>(open_store(dsn_for(1)), one_owner_options);
  // The fair queue beside everything else: its threads wait as rows and are granted by hand-offs in
  // the releasing commit, while the other holders race for the same names, and it fences some work.
  bool queues = !advisory;
  auto fair_options = manager_options;
  fair_options.fair_queue = true;
  auto fair_store = queues ? open_store(dsn_for(4)) : nullptr;
  auto fair_manager = queues ? std::make_unique<dblock::LockManager>(fair_store, fair_options) : nullptr;
  auto revoker = open_store(base);  // the operator, on a connection of its own
  DatabaseClockWatch clock_watch(installation.admin(), GetParam().dialect);
  std::vector<std::unique_ptr<RunLoop>> loops;
  for (std::size_t holder : {2, 3})
    loops.push_back(
        std::make_unique<RunLoop>(dsn_for(holder), GetParam().mode, workload, dir, fmt::format("run{}", holder)));

  History history;
  std::atomic<bool> stop{false};
  std::vector<std::jthread> holders;
  // However this function ends (an exception from a fault's set-up or from opening the asynchronous
  // holders' store included), the holders are told to stop before their threads are joined: a join
  // of a holder still at work waits forever (loaded runs hung here, with no failure printed, until
  // ctest's timeout).
  dblock::detail::ScopeExit stop_holders([&]() noexcept {
    stop = true;
    for (auto& loop : loops) loop->signal(SIGCONT);
  });
  holders.emplace_back([&] {
    hold_in_thread(*shared_manager, workload, stop, history, "manager0/thread0", 1, {}, fencing_of(shared_store),
                   &fences);
  });
  holders.emplace_back([&] {
    hold_in_thread(*shared_manager, workload, stop, history, "manager0/thread1", 2, {}, fencing_of(shared_store),
                   &fences);
  });
  holders.emplace_back([&] {
    hold_in_thread(*own_manager, workload, stop, history, "manager1/thread0", 3, {}, fencing_of(own_store), &fences);
  });
  if (one_owner_manager)
    for (std::uint32_t thread : {0u, 1u})
      holders.emplace_back([&, thread] {
        hold_in_thread(*one_owner_manager, workload, stop, history, fmt::format("manager2/thread{}", thread),
                       4 + thread, "manager2");
      });
  if (fair_manager)
    for (std::uint32_t thread : {0u, 1u})
      holders.emplace_back([&, thread] {
        hold_in_thread(*fair_manager, workload, stop, history, fmt::format("fair/thread{}", thread), 6 + thread, {},
                       fair_store, &fences);
      });
  for (std::size_t i = 0; i < loops.size(); ++i)
    holders.emplace_back([&, i] { loops[i]->run(stop, static_cast<std::uint32_t>(10 + i)); });
#if DBLOCK_TEST_WITH_ASIO
  // Beside holder 1, through its proxy: its faults reach the asynchronous holders too.
  auto async_holders = std::make_unique<AsyncHolders>(open_store(dsn_for(1)), manager_options, workload, stop, history);
#endif

  // The nemesis: new faults every 50-250 ms, each undone after its own time, so that faults
  // overlap. Its pauses are the fault schedule, not synchronisation.
  std::map<std::string, int> faults;
  std::mt19937 random(42);
  auto between = [&](int low_ms, int high_ms) {
    return std::chrono::milliseconds(low_ms + random() % (high_ms - low_ms));
  };
  std::vector<std::pair<Clock::time_point, std::function<void()>>> undo;
  auto undo_due = [&](Clock::time_point until) {
    std::erase_if(undo, [&](auto& entry) {
      if (entry.first > until) return false;
      entry.second();
      return true;
    });
  };
  auto at_work = [&]() -> RunLoop* {  // a wrapper whose command is at work, if any
    auto first = random() % loops.size();
    for (std::size_t i = 0; i < loops.size(); ++i)
      if (loops[(first + i) % loops.size()]->at_work()) return loops[(first + i) % loops.size()].get();
    return nullptr;
  };
  // The run goes on past its length until the in-process holders alone have ended enough beliefs
  // to judge (a loaded machine grants less in the same time), and fenced some work, up to four
  // lengths.
  auto end = Clock::now() + run_length();
  auto hard_end = Clock::now() + 4 * run_length();
  // Waiter rows seen by the operator's connection: the fair holders did queue (and the run goes on
  // until one of them has been granted too).
  int queued_seen = 0;
  auto enough = [&] {
    return Clock::now() >= end && history.size() >= kEnoughBeliefs && (advisory || fences.load() > 0) &&
           (!queues || (queued_seen > 0 && history.of_holders("fair/") > 0)) &&
           (advisory || workload != Workload::locks || faults["ask"] > 0);
  };
  for (int round = 0; !enough() && Clock::now() < hard_end; ++round) {
    std::this_thread::sleep_for(between(50, 250));
    undo_due(Clock::now());
    if (queues) {
      try {
        auto& queue = dblock::detail::StoreParts::backend(*revoker).queue().get();
        for (const auto& name : workload == Workload::locks ? kNames : std::vector<std::string>{"rw"})
          if (queue.waiter_rows(name) > 0) ++queued_seen;
      } catch (const dblock::Error&) {
        // the operator's connection is not faulted; a busy moment is looked at again next round
      }
    }
    // A network fault every other round, on a random holder: about one stalled at a time.
    if (networked && round % 4 == 0) {
      // Stall past the TTL: packets held, no reset.
      auto* proxy = proxies[random() % proxies.size()].get();
      proxy->set_stalled(true);
      undo.emplace_back(Clock::now() + between(400, 1500), [proxy] { proxy->set_stalled(false); });
      ++faults["stall"];
    } else if (networked && !advisory && round % 4 == 2) {
      // Cut (table mode only: an advisory lock goes with its connection at once, see doc/guarantees.md).
      auto* proxy = proxies[random() % proxies.size()].get();
      proxy->set_down(true);
      undo.emplace_back(Clock::now() + between(50, 300), [proxy] { proxy->set_down(false); });
      ++faults["cut"];
    }
    // An operator's forced release (table mode: revocation), now and then: the revoked holder
    // must stop believing before anyone else is granted.
    if (!advisory && round % 5 == 1) {
      try {
        auto name =
            workload == Workload::locks ? kNames[random() % kNames.size()] : std::string(random() % 2 ? "sem" : "rw");
        if (revoker->revoke(name)) ++faults["revoke"];
      } catch (const dblock::Error&) {
        // the revoker's own connection is not faulted; a conflict on a cluster is tried again later
      }
    }
    // And a polite request to let go (table mode): the holder hears it at a renewal and releases,
    // a hand-over in the middle of every other fault.
    if (!advisory && workload == Workload::locks && round % 5 == 3) {
      try {
        if (revoker->request_release(kNames[random() % kNames.size()])) ++faults["ask"];
      } catch (const dblock::Error&) {
        // as for revocations
      }
    }
    // And a process fault on a wrapper whose command is at work, when there is one.
    auto* loop = at_work();
    if (!loop) continue;
    if (round % 6 == 0) {
      // SIGKILL: its command must not work on unlocked.
      if (loop->signal_at_work(SIGKILL)) ++faults["kill wrapper"];
    } else if (round % 6 == 3) {
      // SIGKILL of the guard alone (the OOM killer's pick): the wrapper must not release while
      // anything of the command may still run.
      if (loop->kill_guard_at_work()) ++faults["kill guard"];
    } else if (auto paused = loop->signal_at_work_pid(SIGSTOP)) {
      // Paused past its deadline: nobody renews, its command must stop in time.
      undo.emplace_back(Clock::now() + between(400, 1500), [loop, paused] { loop->resume(paused); });
      ++faults["pause wrapper"];
    }
  }
  undo_due(Clock::time_point::max());
  stop = true;
  for (auto& loop : loops) loop->signal(SIGCONT);
  holders.clear();  // joins
#if DBLOCK_TEST_WITH_ASIO
  async_holders->join();
  async_holders.reset();
#endif
  for (auto& loop : loops) loop->collect(history);

  auto beliefs = history.take();
  std::string summary;
  for (auto& [fault, count] : faults) summary += fmt::format(" {}={}", fault, count);
  RecordProperty("faults", summary);
  std::map<std::string, int> kinds;
  for (auto& belief : beliefs) ++kinds[std::string(dblock::holder_kind_name(belief.kind))];
  for (auto& [kind, count] : kinds) summary += fmt::format(" {}-beliefs={}", kind, count);
  auto async_beliefs = beliefs_of_holders(beliefs, "async/");
  auto fair_beliefs = beliefs_of_holders(beliefs, "fair/");
  summary += fmt::format(" async-holder-beliefs={} fenced-works={} fair-holder-beliefs={} queued-seen={}",
                         async_beliefs, fences.load(), fair_beliefs, queued_seen);
  std::cout << "[ nemesis  ] " << beliefs.size() << " belief intervals; faults:" << summary << "\n";
  EXPECT_GE(beliefs.size(), kEnoughBeliefs) << "too few grants to say anything";
  if (!advisory) {
    EXPECT_GT(fences.load(), 0) << "no work was fenced: the renewals and tries beside a fence went untested";
  }
  if (!advisory && workload == Workload::locks) {
    EXPECT_GT(faults["ask"], 0) << "no holder was asked to let go";
  }
  if (queues) {
    EXPECT_GT(fair_beliefs, 0) << "the fair-queue holders were never granted";
    EXPECT_GT(queued_seen, 0) << "no fair-queue holder was ever seen waiting: the queue went untested";
  }
  int fault_count = 0;
  for (auto& [fault, count] : faults) fault_count += count;
  EXPECT_GE(fault_count, 4) << "the nemesis did too little";
  auto clocks = clock_watch.stop_and_summarize();
  std::cout << "[ nemesis  ] " << clocks << "\n";
  auto found = violations(beliefs);
  for (auto& violation : found) ADD_FAILURE() << violation << "\n(" << clocks << ")";
  if (found.empty() && std::getenv("DBLOCK_NEMESIS_KEEP") == nullptr)
    std::filesystem::remove_all(dir);
  else
    std::cout << "[ nemesis  ] wrapper logs kept in " << dir << "\n";
}

INSTANTIATE_TEST_SUITE_P(
    Backends, Nemesis,
    ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable, dblock::test::kMysqlTable,
                                             dblock::test::kSqlite, dblock::test::kSqliteQueued,
                                             dblock::test::kPostgresAdvisory, dblock::test::kMysqlAdvisory,
                                             dblock::test::kGaleraTable, dblock::test::kPgBouncerTable})),
    [](const auto& info) { return std::string(info.param.label); });
INSTANTIATE_TEST_SUITE_P(Backends, GroupNemesis,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kSqlite,
                              dblock::test::kSqliteQueued, dblock::test::kGaleraTable, dblock::test::kPgBouncerTable})),
                         [](const auto& info) { return std::string(info.param.label); });

TEST(NemesisChecker, AnOverlapSaysWhichDeadlineTheEarlierHolderBelieved) {
  Belief earlier{"a", 1, 0, 10'000'000, "x"};
  earlier.deadlines = {{0, 15'000'000}};
  Belief cli{"a", 2, 5'000'000, 20'000'000, "y"};
  cli.faults = {{7'000'000, "KILL to guard 12 of wrapper 11"}, {9'000'000, "guard 12 ended 250.0 ms after its KILL"}};
  auto found = violations({earlier, cli});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("[seen -5.0 ms: deadline +10.0 ms]"), std::string::npos) << found[0];
  EXPECT_NE(found[0].find("no deadline trace"), std::string::npos) << found[0];
  EXPECT_NE(
      found[0].find("[+2.0 ms: KILL to guard 12 of wrapper 11] [+4.0 ms: guard 12 ended 250.0 ms after its KILL]"),
      std::string::npos)
      << "what the nemesis did to a CLI holder's wrapper: " << found[0];
}

TEST(NemesisChecker, AGuardKilledUnderAFrozenWrapperEndsTheBeliefAndItsCommandMustDieWithIt) {
  Belief command{"a", 1, 0, 30'000'000, "run2 round 0"};
  Belief next{"a", 2, 20'000'000, 40'000'000, "manager0"};
  command.faults = {{5'000'000, "STOP to wrapper 11 at work"},
                    {10'000'000, "KILL to guard 12 of wrapper 11"},
                    {31'000'000, "guard 12 ended 21.0 ms after its KILL"},
                    {50'000'000, "KILL to guard 12 of wrapper 11"},  // its zombie, killed again
                    {50'100'000, "guard 12 ended 0.1 ms after its KILL"}};
  EXPECT_TRUE(violations({command, next}).empty())
      << "the command worked until its guard had ended: the product's promise for this double fault";
  command.last_ns = 37'000'000;
  auto found = violations({command, next});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("worked 6.000 ms past the end of its guard"), std::string::npos) << found[0];
  // Killed again before it ended: the second KILL's watch noted the end first, 1 ms after its KILL.
  command.faults = {{5'000'000, "STOP to wrapper 11 at work"},
                    {10'000'000, "KILL to guard 12 of wrapper 11"},
                    {50'000'000, "KILL to guard 12 of wrapper 11"},
                    {51'000'000, "guard 12 ended 1.0 ms after its KILL"},
                    {51'100'000, "guard 12 ended 41.1 ms after its KILL"}};
  command.last_ns = 50'500'000;
  EXPECT_TRUE(violations({command, next}).empty()) << "the guard ended at 51 ms, whichever watch said so first";
  command.last_ns = 60'000'000;
  found = violations({command, next});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("worked 9.000 ms past the end of its guard"), std::string::npos) << found[0];
  command.last_ns = 30'000'000;
  command.faults = {{5'000'000, "STOP to wrapper 11 at work"},
                    {8'000'000, "CONT to wrapper 11"},
                    {10'000'000, "KILL to guard 12 of wrapper 11"}};
  EXPECT_EQ(violations({command, next}).size(), 1u) << "a running wrapper renews, so its command's belief is whole";
  command.faults = {{10'000'000, "KILL to guard 12 of wrapper 11"}};
  EXPECT_EQ(violations({command, next}).size(), 1u) << "no pause, no exemption";
}

TEST(NemesisChecker, FindsOverlapsAndTokensOutOfOrder) {
  EXPECT_TRUE(violations({{"a", 1, 0, 10, "x"}, {"a", 2, 11, 20, "y"}, {"b", 1, 5, 15, "z"}}).empty());
  EXPECT_EQ(violations({{"a", 1, 0, 10, "x"}, {"a", 2, 10, 20, "y"}}).size(), 1u) << "touching is overlapping";
  EXPECT_EQ(violations({{"a", 1, 0, 100, "x"}, {"a", 2, 20, 30, "y"}, {"a", 3, 40, 50, "z"}}).size(), 2u);
  EXPECT_EQ(violations({{"a", 5, 0, 10, "x"}, {"a", 4, 20, 30, "y"}}).size(), 1u);
  EXPECT_TRUE(violations({{"a", 5, 0, 10, "x"}, {"a", 5, 20, 30, "x"}}).empty())
      << "a holder's earlier lease adopted again after its belief ended";
  EXPECT_EQ(violations({{"a", 5, 0, 10, "x"}, {"a", 5, 20, 30, "y"}}).size(), 1u) << "another holder, one token";
  using dblock::HolderKind;
  Belief outer{"a", 3, 0, 10, "t0", HolderKind::exclusive, "m"}, inner{"a", 3, 5, 20, "t1", HolderKind::exclusive, "m"};
  EXPECT_TRUE(violations({outer, inner}).empty()) << "re-entries of one owner share the name and its token";
  inner.token = 4;
  EXPECT_EQ(violations({outer, inner}).size(), 1u) << "one owner, but a new grant beside the old one";
}

TEST(NemesisChecker, FindsTooManyPermitHoldersAndWritersBesideReaders) {
  using dblock::HolderKind;
  auto permit = [](std::int64_t token, std::int64_t first, std::int64_t last) {
    return Belief{"s", token, first, last, "p" + std::to_string(token), HolderKind::permit};
  };
  EXPECT_TRUE(violations({permit(1, 0, 10), permit(2, 5, 20), permit(3, 11, 30)}).empty()) << "two at a time";
  EXPECT_EQ(violations({permit(1, 0, 10), permit(2, 5, 20), permit(3, 8, 30)}).size(), 1u) << "three at once";
  EXPECT_EQ(violations({permit(2, 0, 10), permit(2, 20, 30)}).size(), 1u) << "two permits with one token";
  Belief reader_a{"rw", 7, 0, 10, "ra", HolderKind::shared, "owner-a"},
      reader_b{"rw", 8, 5, 20, "rb", HolderKind::shared};
  EXPECT_TRUE(violations({reader_a, reader_b}).empty()) << "readers share the name, each with a token of its own";
  Belief same_token{"rw", 7, 5, 20, "rc", HolderKind::shared};
  EXPECT_EQ(violations({reader_a, same_token}).size(), 1u) << "two owners' memberships with one token";
  Belief kept{"rw", 7, 22, 30, "ra2", HolderKind::shared, "owner-a"};
  EXPECT_TRUE(violations({reader_a, reader_b, kept}).empty()) << "a reader's own membership keeps its token";
  Belief task_reader{"rw", 11, 0, 10, "task", HolderKind::shared},
      task_again{"rw", 11, 20, 30, "task", HolderKind::shared};
  EXPECT_TRUE(violations({task_reader, task_again}).empty()) << "a holder with no owner named is an owner of its own";
  Belief writer{"rw", 9, 15, 25, "w", HolderKind::exclusive};
  EXPECT_EQ(violations({reader_a, reader_b, writer}).size(), 1u) << "a writer beside a reader";
  Belief writer_after{"rw", 9, 21, 25, "w", HolderKind::exclusive},
      later_reader{"rw", 6, 30, 40, "rd", HolderKind::shared};
  EXPECT_EQ(violations({reader_a, reader_b, writer_after, later_reader}).size(), 1u)
      << "a reader's token below the writer's before it";
}

}  // namespace
