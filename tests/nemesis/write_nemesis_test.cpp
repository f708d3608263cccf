// The write nemesis (issue 32): holders in several processes (write_worker, each a process tree of
// its own group) contend for two names and write to an application table only inside fenced
// transactions — half through Store::fenced, half with the SQL fence function on a connection of
// their own — while the nemesis pauses whole process trees past the TTL (SIGSTOP of the group,
// then SIGCONT) before the fence, between the fence and the commit and between transactions; it
// also pauses them at random moments, stalls and cuts their connections and SIGKILLs them.
//
// The phased pauses are deterministic: a worker announces its phase and blocks; the nemesis stops
// its group, and a probe (a holder in this process, on a connection nobody faults) acquires the
// name and commits a fenced write of its own before the paused tree is resumed. So each phased
// pause is a paused holder that wakes up after a newer holder wrote.
//
// The checker reads the commit order from the database: every write bumps a per-name counter row
// (its row lock orders the writers of a name) and stores (name, token, n). It fails on any
// committed write whose token is lower than that of a write committed before it, and on any
// phased pause after which the name was not granted again within TTL + the backend's fence bound
// (doc/semantics.md, "Fence") + slack. SQLite has no server to end a paused transaction and its
// write lock is the database's: a tree paused between the fence and the commit keeps every name
// for the pause itself, so there the bound is the lease extended by every tree stopped meanwhile.
//
// The control run does the same writes without the fence (`!lock.lost()`, then a plain
// transaction): there the checker must find the resumed holders' stale writes.
//
// DBLOCK_WRITE_NEMESIS_SECONDS sets the length of each run (default 5; longer until every phase was hit).

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "app_writes.hpp"
#include "support/build_paths.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"
#include "support/tcp_proxy.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using dblock::test::BackendCase;
namespace app = dblock::test::app_writes;

constexpr auto kTtl = 600ms;
constexpr std::size_t kWorkers = 3;
const std::vector<std::string> kNames{"w-a", "w-b"};
/// Scheduling on a loaded 2-core machine, the waiter's poll, the grant's reply.
constexpr auto kSlack = 1000ms;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
std::int64_t to_ns(std::chrono::milliseconds ms) { return ms.count() * 1'000'000; }

std::chrono::seconds run_length() {
  const char* text = std::getenv("DBLOCK_WRITE_NEMESIS_SECONDS");
  return std::chrono::seconds(text != nullptr && std::atoi(text) > 0 ? std::atoi(text) : 5);
}

/// How long past the lease's end the backend's server takes to end a fenced transaction whose
/// client stopped (doc/semantics.md, "Fence"): PostgreSQL's timers are the lease left in ms,
/// MariaDB's idle_transaction_timeout whole seconds (at least 1).
std::chrono::milliseconds fence_bound(const std::string& dialect) {
  return dialect == "mysql" ? 1000ms : dialect == "postgresql" ? 50ms : 0ms;
}

struct Write {
  std::string name;
  std::int64_t token = 0, n = 0;
};

/// Committed writes whose token is lower than that of a write committed before them (per name,
/// in commit order n), one line each.
std::vector<std::string> stale_writes(std::vector<Write> writes) {
  std::sort(writes.begin(), writes.end(),
            [](const Write& a, const Write& b) { return std::tie(a.name, a.n) < std::tie(b.name, b.n); });
  std::vector<std::string> found;
  std::map<std::string, Write> highest;
  for (auto& write : writes) {
    auto [at, fresh] = highest.try_emplace(write.name, write);
    if (fresh) continue;
    if (write.token < at->second.token)
      found.push_back(fmt::format("'{}': write n={} with token {} committed after write n={} with token {}", write.name,
                                  write.n, write.token, at->second.n, at->second.token));
    else
      at->second = write;
  }
  return found;
}

struct Grant {
  std::string name;
  std::int64_t token = 0, sent_ns = 0, granted_ns = 0;
  int worker = -1;  // -1: the probe
};

struct Pause {
  std::string phase, name;
  std::int64_t token = 0, stopped_ns = 0, resumed_ns = 0;
  bool wrapped = false;  // a `dblock run` tree
};

struct Interval {
  std::int64_t from_ns, to_ns;
};

/// The children of `pid`, as /proc lists them.
std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream listed(fmt::format("/proc/{}/task/{}/children", pid, pid));
  std::vector<pid_t> children;
  for (pid_t child = 0; listed >> child;) children.push_back(child);
  return children;
}

/// One holder process tree at a time in one slot, spawned again after a kill: a write_worker, or
/// (`wrapped`) a `dblock run` whose command is a write_worker; there the tree is two groups: the
/// wrapper's, and the guard's, which holds the command.
class Slot {
 public:
  Slot(int index, std::string dsn, bool wrapped) : index_(index), dsn_(std::move(dsn)), wrapped_(wrapped) {}

  /// Stops the group; stops nest (a random pause over a phased one), the last resume continues it.
  /// Returns the tree stopped (0: none running), for resume: a tree spawned since is not touched.
  pid_t stop() {
    std::lock_guard lock(mutex_);
    if (pid_ <= 0) return 0;
    if (stops_++ == 0) {
      kill(-pid_, SIGSTOP);
      guards_ = wrapped_ ? children_of(pid_) : std::vector<pid_t>{};
      for (auto guard : guards_) kill(-guard, SIGSTOP);
    }
    return pid_;
  }
  void resume(pid_t tree) {
    std::lock_guard lock(mutex_);
    if (tree == 0 || tree != pid_ || --stops_ != 0) return;
    for (auto guard : guards_) kill(-guard, SIGCONT);
    kill(-pid_, SIGCONT);
  }
  /// SIGKILLs the tree unless it is stopped (so that a measured pause stays one); true when it did.
  bool kill_unless_stopped() {
    std::lock_guard lock(mutex_);
    return stops_ == 0 && pid_ > 0 && kill(-pid_, SIGKILL) == 0;
  }
  void fault(std::int64_t from_ns, std::int64_t to_ns) {
    std::lock_guard lock(mutex_);
    faults_.push_back({from_ns, to_ns});
  }
  /// Whether a fault (stall, cut, random pause) of this slot touched [from, to].
  bool faulted(std::int64_t from_ns, std::int64_t to_ns) {
    std::lock_guard lock(mutex_);
    return std::any_of(faults_.begin(), faults_.end(),
                       [&](const Interval& f) { return f.from_ns <= to_ns && from_ns <= f.to_ns; });
  }

  /// Runs trees until `stopping`, each with the command line `make_args(round, spawned_ns)` gives;
  /// `on_line` sees each event line; returns how many trees ran.
  int run(const std::function<std::vector<std::string>(int, std::int64_t)>& make_args,
          const std::atomic<bool>& stopping, const std::filesystem::path& log,
          const std::function<void(Slot&, const std::string&)>& on_line) {
    int spawned_count = 0;
    for (int round = 0; !stopping; ++round) {
      int to_worker[2], from_worker[2];
      if (pipe2(to_worker, O_CLOEXEC) != 0 || pipe2(from_worker, O_CLOEXEC) != 0) {
        ADD_FAILURE() << "pipe2 failed";
        return spawned_count;
      }
      auto args = make_args(round, now_ns());
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_adddup2(&actions, to_worker[0], 0);
      posix_spawn_file_actions_adddup2(&actions, from_worker[1], 1);
      auto log_path = log.string();
      posix_spawn_file_actions_addopen(&actions, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      posix_spawnattr_t attributes;
      posix_spawnattr_init(&attributes);
      posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);  // a group of its own, pgid = pid
      posix_spawnattr_setpgroup(&attributes, 0);
      pid_t pid = 0;
      int spawned = 0;
      {
        std::lock_guard lock(mutex_);
        spawned = posix_spawn(&pid, argv[0], &actions, &attributes, argv.data(), environ);
        if (spawned == 0) pid_ = pid;
        stops_ = 0;
        to_worker_ = to_worker[1];
      }
      posix_spawn_file_actions_destroy(&actions);
      posix_spawnattr_destroy(&attributes);
      close(to_worker[0]);
      close(from_worker[1]);
      if (spawned != 0) {
        ADD_FAILURE() << "posix_spawn failed: " << spawned;
        close(to_worker[1]);
        close(from_worker[0]);
        return spawned_count;
      }
      ++spawned_count;
      std::string pending;
      char buffer[4096];
      for (ssize_t got; (got = read(from_worker[0], buffer, sizeof buffer)) != 0;) {
        if (got < 0) {
          if (errno == EINTR) continue;
          break;
        }
        pending.append(buffer, static_cast<std::size_t>(got));
        for (std::size_t eol; (eol = pending.find('\n')) != std::string::npos; pending.erase(0, eol + 1))
          on_line(*this, pending.substr(0, eol));
      }
      int status = 0;
      waitpid(pid, &status, 0);
      {
        std::lock_guard lock(mutex_);
        pid_ = 0;
        if (to_worker_ >= 0) close(to_worker_);
        to_worker_ = -1;
      }
      close(from_worker[0]);
      // `dblock run`: 69 when its connection was cut, 70 when the lease was lost (a pause), 75 when
      // not granted within --wait, 137 when its command was killed.
      auto code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
      bool expected = code == 0 || (wrapped_ && (code == 69 || code == 70 || code == 75 || code == 137));
      if (!expected) ADD_FAILURE() << "holder " << index_ << " exited with " << code << " (log: " << log << ")";
    }
    return spawned_count;
  }

  /// Tells the worker to take no more names: its stdin ends.
  void finish() {
    std::lock_guard lock(mutex_);
    if (to_worker_ >= 0) close(to_worker_);
    to_worker_ = -1;
  }

  /// Lets the worker past its pause once the group is continued (it reads the byte then).
  void hand_over() {
    std::lock_guard lock(mutex_);
    char byte = 'c';
    if (to_worker_ >= 0 && write(to_worker_, &byte, 1) != 1) ADD_FAILURE() << "could not hand the worker its byte";
  }

  [[nodiscard]] int index() const { return index_; }
  [[nodiscard]] const std::string& dsn() const { return dsn_; }

 private:
  int index_;
  std::string dsn_;
  bool wrapped_;
  std::mutex mutex_;
  pid_t pid_ = 0;
  std::vector<pid_t> guards_;  // of the wrapper stopped
  int stops_ = 0;
  int to_worker_ = -1;
  std::vector<Interval> faults_;
};

enum class State { stopped, gone, running };

/// Waits (bounded) until `pid` is stopped, as /proc says, or gone.
State wait_stopped(pid_t pid) {
  auto give_up = Clock::now() + 2s;
  while (Clock::now() < give_up) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    auto close = text.rfind(')');
    if (close == std::string::npos || close + 2 >= text.size() || text[close + 2] == 'Z') return State::gone;
    if (text[close + 2] == 'T' || text[close + 2] == 't') return State::stopped;
    std::this_thread::sleep_for(1ms);  // polling another process's state
  }
  return State::running;
}

class WriteNemesis : public ::testing::TestWithParam<BackendCase> {
 protected:
  void TearDown() override {
    if (GetParam().dsn_env == nullptr) dblock::test::remove_embedded_sqlite();
  }
  struct Outcome {
    std::vector<Write> writes;
    std::vector<Pause> pauses;
    std::vector<Grant> grants;
    std::map<std::string, int> events, faults;
    std::vector<std::string> unavailable;                    // pauses after which the name stayed unavailable too long
    std::map<std::string, std::int64_t> max_unavailable_ms;  // per phase
    std::vector<Interval> tree_stops;                        // every tree's stops, phased and random, as they happened
    int probe_writes = 0, probe_failures = 0;
    /// The probe's tries, per probing thread: when it asked, and when each refused try's reply came.
    struct ProbeTry {
      std::string name;
      std::thread::id thread;
      std::int64_t at_ns = 0;
      bool refused = false;  // false: the probe asked then
    };
    std::vector<ProbeTry> probe_tries;
  };
  Outcome run(bool fenced);
};

WriteNemesis::Outcome WriteNemesis::run(bool fenced) {
  Outcome out;
  std::string server_dsn;
  [&] { DBLOCK_REQUIRE_BACKEND_DSN(server_dsn, GetParam()); }();
  if (server_dsn.empty()) return out;
  const std::string dialect = GetParam().dialect;
  const bool networked = GetParam().dsn_env != nullptr;
  dblock::test::Installation installation(GetParam(), server_dsn);
  const auto& prefix = installation.prefix();
  auto& admin = installation.admin();
  admin.exec(app::create_seq(dialect, prefix));
  admin.exec(app::create_writes(dialect, prefix));
  for (auto& name : kNames) admin.exec(fmt::format("INSERT INTO {}app_seq (name, n) VALUES ('{}', 0)", prefix, name));

  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("dblock-write-nemesis-{}-{}-{}", getpid(), GetParam().label, fenced ? "fenced" : "unfenced");
  std::filesystem::create_directories(dir);

  // Worker i talks to node i (mod the nodes) of a cluster, through a proxy of its own.
  auto nodes = dblock::test::node_dsns(GetParam(), server_dsn);
  std::vector<std::unique_ptr<dblock::test::TcpProxy>> proxies;
  std::vector<std::unique_ptr<Slot>> slots;
  // In the fenced run one more slot holds through `dblock run` (the control needs lost(), in-process).
  for (std::size_t i = 0; i < kWorkers + (fenced ? 1 : 0); ++i) {
    auto dsn = nodes[i % nodes.size()];
    if (networked) {
      proxies.push_back(std::make_unique<dblock::test::TcpProxy>(dblock::test::dsn_port(dsn)));
      dsn = dblock::test::with_port(dsn, proxies.back()->port());
    }
    slots.push_back(std::make_unique<Slot>(static_cast<int>(i), dsn, i == kWorkers));
  }

  // The probe: a holder in this process on a connection nobody faults.
  auto probe_store = dblock::Store::open(installation.dsn());
  std::mutex tries_mutex;  // guards out.probe_tries
  auto note_try = [&](std::string_view name, bool refused) {
    std::lock_guard guard(tries_mutex);
    out.probe_tries.push_back({std::string(name), std::this_thread::get_id(), now_ns(), refused});
  };
  dblock::LockManager probe_manager(
      probe_store, dblock::ManagerOptions{.default_ttl = kTtl, .backoff_max = 20ms, .on_event = [&](const auto& event) {
                                            if (event.kind == dblock::LockEventKind::contended)
                                              note_try(event.name, true);
                                          }});
  const auto max_pause = kTtl + fence_bound(dialect) + kSlack + 500ms;

  std::mutex mutex;  // guards `out` and `probes`
  std::vector<std::future<void>> probes;
  auto probe = [&](std::string name) {
    try {
      note_try(name, false);
      auto lock = probe_manager.acquire(name, 20s);
      {
        std::lock_guard guard(mutex);
        out.grants.push_back({name, lock.token(), now_ns(), now_ns(), -1});
      }
      bool wrote = false;
      try {
        probe_store->fenced(lock, [&](dblock::FencedTransaction& tx) {
          for (auto& statement : app::fenced_write(dialect, prefix, name, lock.token()))
            tx.execute(statement.sql, statement.params);
        });
        wrote = true;
      } catch (const dblock::Error&) {
        // a paused unfenced writer's row lock on app_seq outlasted the probe's lease (control run)
      }
      {
        std::lock_guard guard(mutex);
        ++(wrote ? out.probe_writes : out.probe_failures);
      }
      try {
        lock.release();
      } catch (const dblock::LockLost&) {
        // its lease ended while its write waited
      }
    } catch (const dblock::Error& e) {
      std::lock_guard guard(mutex);
      ++out.probe_failures;
      out.events["probe error: " + std::string(e.what()).substr(0, 80)]++;
    }
  };

  auto on_line = [&](Slot& slot, const std::string& line) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "grant") {
      Grant grant;
      in >> grant.name >> grant.token >> grant.sent_ns >> grant.granted_ns;
      grant.worker = slot.index();
      std::lock_guard guard(mutex);
      out.grants.push_back(grant);
      return;
    }
    if (kind != "pause") {
      std::lock_guard guard(mutex);
      ++out.events[kind];
      return;
    }
    Pause pause;
    pid_t pid = 0;
    in >> pause.phase >> pause.name >> pause.token >> pid;
    pause.wrapped = slot.index() == static_cast<int>(kWorkers);
    auto tree = slot.stop();
    auto state = wait_stopped(pid);
    if (state != State::stopped) {
      // SIGKILLed between its announcement and the stop: no pause to measure.
      if (state == State::running) ADD_FAILURE() << "worker " << slot.index() << " did not stop";
      slot.resume(tree);
      return;
    }
    pause.stopped_ns = now_ns();
    slot.hand_over();
    auto probed = std::async(std::launch::async, probe, pause.name);
    // Resumed once the probe wrote (a newer holder's write committed), or at the longest pause.
    probed.wait_for(std::chrono::nanoseconds(pause.stopped_ns + to_ns(max_pause) - now_ns()));
    pause.resumed_ns = now_ns();
    slot.resume(tree);
    std::lock_guard guard(mutex);
    out.pauses.push_back(pause);
    out.tree_stops.push_back({pause.stopped_ns, pause.resumed_ns});
    probes.push_back(std::move(probed));
  };

  const auto start_ns = now_ns();
  const auto end_ns = start_ns + to_ns(std::chrono::duration_cast<std::chrono::milliseconds>(run_length()));
  // Past end_ns the run goes on (up to 15 s more) until every phase was paused at (on a loaded
  // machine a worker may lose its first hold before it pauses), and in the control until a stale
  // write landed. The workers' own limit is that cap.
  const auto cap_ns = end_ns + to_ns(15000ms);
  std::atomic<bool> stopping{false};
  auto read_writes = [&] {
    std::vector<Write> writes;
    for (auto& row : admin.query(app::select_all(dialect, prefix))) {
      Write write;
      std::istringstream(row) >> write.name >> write.token >> write.n;
      writes.push_back(write);
    }
    return writes;
  };
  auto enough = [&] {
    if (now_ns() < end_ns) return false;
    if (now_ns() >= cap_ns) return true;
    std::map<std::string, int> seen;
    {
      std::lock_guard guard(mutex);
      for (auto& pause : out.pauses) ++seen[pause.phase];
    }
    // The control goes on until a stale write landed (SQLite: a probe may wait for the database's
    // write lock past a pause, and then the resumed holder writes first).
    return fenced ? seen.size() == 3 : seen["before"] >= 1 && !stale_writes(read_writes()).empty();
  };
  std::vector<std::jthread> runners;
  std::atomic<int> trees{0};
  for (auto& slot : slots) {
    auto* s = slot.get();
    std::function<std::vector<std::string>(int, std::int64_t)> make_args = [&, s](int round, std::int64_t) {
      std::vector<std::string> args{WRITE_WORKER_PATH,
                                    s->dsn(),
                                    dialect,
                                    prefix,
                                    fenced ? "fenced" : "unfenced",
                                    std::to_string(s->index() * 1000 + round),  // the seed
                                    std::to_string(cap_ns),
                                    std::to_string(kTtl.count()),
                                    "30"};
      args.insert(args.end(), kNames.begin(), kNames.end());
      return args;
    };
    if (s->index() == static_cast<int>(kWorkers))
      // One hold per `dblock run`, each pausing, at the phases in turn.
      make_args = [&, s](int round, std::int64_t spawned_ns) {
        return std::vector<std::string>{DBLOCK_CLI_PATH,
                                        "--dsn",
                                        installation.dsn_on(s->dsn()),
                                        "run",
                                        "--name",
                                        kNames[static_cast<std::size_t>(round) % kNames.size()],
                                        "--ttl",
                                        fmt::format("{}ms", kTtl.count()),
                                        "--wait",
                                        "3s",
                                        "--",
                                        WRITE_WORKER_PATH,
                                        s->dsn(),
                                        dialect,
                                        prefix,
                                        "command",
                                        std::to_string(round),  // the seed: the phase
                                        std::to_string(spawned_ns),
                                        std::to_string(kTtl.count()),
                                        "100"};
      };
    runners.emplace_back([&, make_args, s] {
      trees += s->run(make_args, stopping, dir / fmt::format("holder{}.log", s->index()), on_line);
    });
  }

  // Random faults, in the fenced run only (the control shows the fence's effect on the phased
  // pauses alone). Each is undone after its own time, so that faults overlap.
  if (fenced) {
    std::mt19937 random(7);
    auto between = [&](std::chrono::milliseconds low, std::chrono::milliseconds high) {
      return low + std::chrono::milliseconds(random() % (high - low).count());
    };
    std::vector<std::pair<Clock::time_point, std::function<void()>>> undo;
    auto undo_due = [&](Clock::time_point until) {
      std::erase_if(undo, [&](auto& entry) {
        if (entry.first > until) return false;
        entry.second();
        return true;
      });
    };
    for (int round = 0; !enough(); ++round) {
      std::this_thread::sleep_for(between(100ms, 300ms));  // the fault schedule, not synchronisation
      undo_due(Clock::now());
      auto& slot = *slots[random() % slots.size()];
      // A fault of `length` on `slot`, undone by `undo_it` then.
      auto fault = [&](std::chrono::milliseconds length, std::function<void()> undo_it) {
        slot.fault(now_ns(), now_ns() + to_ns(length));
        undo.emplace_back(Clock::now() + length, std::move(undo_it));
      };
      if (networked && round % 4 == 0) {
        auto* proxy = proxies[static_cast<std::size_t>(slot.index())].get();
        proxy->set_stalled(true);  // packets held, no reset
        fault(between(300ms, 1500ms), [proxy] { proxy->set_stalled(false); });
        ++out.faults["stall"];
      } else if (networked && round % 4 == 2) {
        auto* proxy = proxies[static_cast<std::size_t>(slot.index())].get();
        proxy->set_down(true);
        fault(between(50ms, 300ms), [proxy] { proxy->set_down(false); });
        ++out.faults["cut"];
      } else if (round % 5 == 1) {
        // A pause of the whole tree at a random moment, past the TTL.
        auto tree = slot.stop();
        auto stopped_ns = now_ns();
        fault(between(kTtl + 100ms, kTtl + 1200ms), [&, tree, stopped_ns] {
          slot.resume(tree);
          std::lock_guard guard(mutex);
          out.tree_stops.push_back({stopped_ns, now_ns()});
        });
        if (tree != 0) ++out.faults["random pause"];
      } else if (round % 7 == 3) {
        slot.fault(now_ns(), now_ns() + to_ns(2000ms));  // its grants in flight die with it
        if (slot.kill_unless_stopped()) ++out.faults["kill"];
      }
    }
    undo_due(Clock::time_point::max());
  }
  while (!enough()) std::this_thread::sleep_for(50ms);  // polling the run's coverage (the control run)
  stopping = true;
  for (auto& slot : slots) slot->finish();
  runners.clear();  // joins: every worker was told to stop and exited
  for (auto& probed : probes) probed.wait();
  std::cout << "[ write    ] " << trees << " worker trees ran\n";

  out.writes = read_writes();
  admin.exec(fmt::format("DROP TABLE {}app_writes", prefix));
  admin.exec(fmt::format("DROP TABLE {}app_seq", prefix));

  // When someone other than the probe asked for the name after `pause` (a later grant's request):
  // a try of the probe refused after that may have been refused for that holder, not the paused one.
  auto grants_asked_from = [](const Outcome& outcome, const Pause& pause) {
    auto asked = std::numeric_limits<std::int64_t>::max();
    for (auto& grant : outcome.grants)
      if (grant.name == pause.name && grant.token > pause.token && grant.worker >= 0)
        asked = std::min(asked, grant.sent_ns);
    return asked;
  };
  // How long the name was proven unavailable after `pause`, in ms: a try of the probe is sent after
  // its thread's previous instant (its ask, or the reply of its previous refused try), so a refused
  // try was refused no earlier than that instant. Only refusals replied before `others_asked`.
  auto proven_unavailable_ms = [](const Outcome& outcome, const Pause& pause, std::int64_t others_asked) {
    std::int64_t proven = pause.stopped_ns;
    std::map<std::thread::id, std::int64_t> previous;  // per probing thread: its last instant so far
    for (auto& tried : outcome.probe_tries) {          // in the order they were noted, each thread's in time order
      if (tried.name != pause.name) continue;
      auto before = previous.find(tried.thread);
      if (tried.refused && before != previous.end() && tried.at_ns < others_asked && before->second >= pause.stopped_ns)
        proven = std::max(proven, before->second);
      previous[tried.thread] = tried.at_ns;
    }
    return (proven - pause.stopped_ns) / 1'000'000;
  };

  // Unavailability of each phased pause: from the stop to the next grant of the name (any holder).
  // A grant whose worker was faulted while it asked counts from its request (its reply was held).
  for (auto& pause : out.pauses) {
    std::optional<std::int64_t> next;
    for (auto& grant : out.grants) {
      if (grant.name != pause.name || grant.token <= pause.token) continue;
      auto at = grant.granted_ns;
      if (grant.worker >= 0 && slots[static_cast<std::size_t>(grant.worker)]->faulted(grant.sent_ns, grant.granted_ns))
        at = std::max(grant.sent_ns, pause.stopped_ns);
      next = std::min(next.value_or(at), at);
    }
    if (!next) {
      out.unavailable.push_back(fmt::format("'{}' was never granted again after the {} pause of token {}", pause.name,
                                            pause.phase, pause.token));
      continue;
    }
    auto waited_ms = std::max<std::int64_t>(0, (*next - pause.stopped_ns) / 1'000'000);
    auto& max = out.max_unavailable_ms[pause.phase];
    max = std::max(max, waited_ms);
    auto bound = (kTtl + fence_bound(dialect) + kSlack).count();
    if (dialect == "sqlite") {
      // No server ends a paused SQLite transaction, and its write lock is the whole database's:
      // the name may wait for the lease and for every tree stopped meanwhile (any may be inside a
      // transaction, this one too), each for its whole pause.
      auto free_ns = pause.stopped_ns + to_ns(kTtl);
      for (bool extended = true; extended;) {
        extended = false;
        for (auto& stop : out.tree_stops)
          if (stop.from_ns <= free_ns && stop.to_ns > free_ns) {
            free_ns = stop.to_ns;
            extended = true;
          }
      }
      bound = (free_ns - pause.stopped_ns) / 1'000'000 + kSlack.count();
    }
    // The wait measured above also holds how late replies and threads came on a loaded host. A name
    // is unavailable too long only when that is proven: the probe was refused by a try sent after
    // the bound, before anyone else asked for the name again.
    if (waited_ms <= bound) continue;
    auto proven_ms = proven_unavailable_ms(out, pause, grants_asked_from(out, pause));
    if (proven_ms > bound)
      out.unavailable.push_back(fmt::format(
          "'{}' unavailable for {} ms after the {} pause of token {} (bound {} ms; a try of the probe sent {} ms "
          "after the pause was refused)",
          pause.name, waited_ms, pause.phase, pause.token, bound, proven_ms));
    else
      ++out.events[fmt::format("late grant after a {} pause, not proven unavailable past the bound", pause.phase)];
  }

  // Each probe starts while the paused holder's lease may still run, and is refused then: without
  // refusals the check above could prove nothing.
  if (!out.pauses.empty()) {
    EXPECT_TRUE(std::ranges::any_of(out.probe_tries, [](const auto& tried) { return tried.refused; }))
        << "the probe was never refused: its contended events are not heard";
  }

  std::map<std::string, int> phases;
  for (auto& pause : out.pauses) ++phases[pause.phase];
  std::string summary =
      fmt::format("{} run: {} committed writes ({} by the probe, {} probe failures); phased pauses:",
                  fenced ? "fenced" : "unfenced", out.writes.size(), out.probe_writes, out.probe_failures);
  for (auto& [phase, count] : phases) summary += fmt::format(" {}={}", phase, count);
  summary += fmt::format(" ({} of `dblock run` trees)",
                         std::count_if(out.pauses.begin(), out.pauses.end(), [](const Pause& p) { return p.wrapped; }));
  summary += "; faults:";
  for (auto& [fault, count] : out.faults) summary += fmt::format(" {}={}", fault, count);
  summary += "; worker events:";
  for (auto& [event, count] : out.events) summary += fmt::format(" {}={}", event, count);
  summary += "; max unavailable ms:";
  for (auto& [phase, ms] : out.max_unavailable_ms) summary += fmt::format(" {}={}", phase, ms);
  summary += fmt::format("; stale writes: {}", stale_writes(out.writes).size());
  std::cout << "[ write    ] " << summary << "\n";
  RecordProperty("summary", summary);
  if (!HasFailure())
    std::filesystem::remove_all(dir);
  else
    std::cout << "[ write    ] worker logs kept in " << dir << "\n";
  return out;
}

TEST_P(WriteNemesis, NoPausedHoldersWriteLandsAfterANewerOneAndEveryNameComesBackInTime) {
  auto out = run(true);
  if (IsSkipped() || (out.writes.empty() && HasFailure())) return;
  for (auto& stale : stale_writes(out.writes)) ADD_FAILURE() << "stale write: " << stale;
  for (auto& late : out.unavailable) ADD_FAILURE() << late;
  std::map<std::string, int> phases;
  for (auto& pause : out.pauses) ++phases[pause.phase];
  for (const char* phase : {"before", "inside", "between"})
    EXPECT_GE(phases[phase], 1) << "no pause " << phase << " the fence's commit: the run proved nothing of it";
  EXPECT_GE(out.writes.size(), 5u) << "too few writes to say anything";
  EXPECT_GE(out.probe_writes, 1);
}

TEST_P(WriteNemesis, WithoutTheFenceResumedHoldersWritesLandAfterNewerOnes) {
  auto out = run(false);
  if (IsSkipped() || (out.writes.empty() && HasFailure())) return;
  auto stale = stale_writes(out.writes);
  int before = 0;
  for (auto& pause : out.pauses) before += pause.phase == "before" ? 1 : 0;
  ASSERT_GE(before, 1) << "no pause between the lost() check and the write";
  EXPECT_GE(stale.size(), 1u) << "the checker found no stale write where the holders wrote unfenced";
}

INSTANTIATE_TEST_SUITE_P(Backends, WriteNemesis,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable, dblock::test::kSqlite,
                                                                  dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

TEST(WriteNemesisChecker, FindsAWriteWithALowerTokenCommittedAfterAHigherOne) {
  EXPECT_TRUE(stale_writes({{"a", 1, 1}, {"a", 1, 2}, {"a", 3, 3}, {"b", 2, 1}}).empty()) << "equal tokens: one holder";
  EXPECT_EQ(stale_writes({{"a", 3, 1}, {"a", 2, 2}}).size(), 1u);
  EXPECT_EQ(stale_writes({{"a", 1, 1}, {"a", 5, 2}, {"a", 4, 3}, {"a", 2, 4}, {"a", 6, 5}}).size(), 2u);
  EXPECT_TRUE(stale_writes({{"a", 5, 2}, {"b", 1, 3}, {"a", 4, 1}}).empty()) << "commit order is n, not row order";
}

}  // namespace
