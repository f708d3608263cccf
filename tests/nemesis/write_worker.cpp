// A holder process of the write nemesis (write_nemesis_test.cpp): it takes one of the given names
// with a LockManager of its own and, while it holds it, writes to the application's tables, one
// row per transaction: `UPDATE <prefix>app_seq SET n = n + 1 WHERE name = ?` then a row
// (name, token, n) in `<prefix>app_writes`. The row lock on app_seq orders the writers of a name,
// so n is the commit order the checker reads from the database.
//
// fenced:   each write is a fenced transaction (Store::fenced, the lock's token).
// unfenced: the control: `!lock.lost()`, then the same write in a plain transaction on a
//           connection of the application's own (no fence).
//
// Now and then it pauses at a chosen phase — before the fence (in the control: between the lost()
// check and the write), between the fence and the commit, or between two transactions — by
// printing `pause ...` and blocking on stdin: the nemesis stops the whole process group (SIGSTOP),
// hands it a byte and resumes it (SIGCONT) past the lease, so the worker's renewals are frozen
// with it, as in a frozen VM. Events go to stdout, one line each (one write(2), atomic on a pipe):
//   grant NAME TOKEN SENT_NS GRANTED_NS | pause PHASE NAME TOKEN PID NS | commit NAME TOKEN
//   refused NAME TOKEN | failed NAME TOKEN | lost NAME TOKEN
// Times are CLOCK_MONOTONIC (std::chrono::steady_clock), which every process on the host shares.
//
// The process forks once: the parent (the group's leader) only waits, so that the nemesis pauses
// and kills a process tree, as it would a `dblock run` wrapper with its command.
//
// DBLOCK_TEST_FENCE_OFF / DBLOCK_TEST_FENCE_UNBOUNDED (only to see the nemesis fail): see below.
//
// It stops taking names at UNTIL_NS or when its stdin ends, whichever comes first.
// Usage: write_worker SERVER_DSN DIALECT PREFIX fenced|unfenced SEED UNTIL_NS TTL_MS PAUSE_PERCENT NAME...
//        dblock run ... -- write_worker SERVER_DSN DIALECT PREFIX command SEED SPAWNED_NS TTL_MS PAUSE_PERCENT
// The second form is one hold of `dblock run`'s grant (DBLOCK_LOCK_NAME, DBLOCK_FENCING_TOKEN),
// fenced; its tree is the wrapper's: the wrapper's group and the guard's, which holds the command.

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <dblock/dblock.hpp>

#include "app_writes.hpp"
#include "support/admin.hpp"
#include "support/servers.hpp"

namespace {

using namespace std::chrono_literals;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void emit(const std::string& line) {
  auto text = line + "\n";
  if (write(1, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::_Exit(75);  // the nemesis is gone
}

enum class Phase { none, before, inside, between };
constexpr Phase kPhases[] = {Phase::before, Phase::inside, Phase::between};
const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::before:
      return "before";
    case Phase::inside:
      return "inside";
    case Phase::between:
      return "between";
    default:
      return "none";
  }
}

struct Config {
  std::string server_dsn, dialect, prefix;
  bool fenced = true;
  std::uint32_t seed = 0;
  std::int64_t until_ns = 0;  // --command: when `dblock run` was spawned (its grant was asked for)
  std::chrono::milliseconds ttl{600};
  int pause_percent = 50;
  std::vector<std::string> names;
};

/// The grant a hold writes under; `lock` is empty under `dblock run`, which holds it for us.
struct Held {
  std::string name;
  std::int64_t token = 0;
  const dblock::Lock* lock = nullptr;
};

class Worker {
 public:
  explicit Worker(Config config) : config_(std::move(config)), random_(config_.seed) {}

  /// Holds and writes until the time is up, with a LockManager of its own.
  void run() {
    while (!manager_ && now_ns() < config_.until_ns) {
      if (!open_store()) continue;
      try {  // the manager reads the schema version: a cut can fail it as it fails the store's opening
        manager_ = std::make_unique<dblock::LockManager>(
            store_, dblock::ManagerOptions{.default_ttl = config_.ttl, .backoff_max = 50ms});
      } catch (const dblock::Error&) {
        std::this_thread::sleep_for(50ms);  // the nemesis's fault lasts a while
      }
    }
    while (manager_ && now_ns() < config_.until_ns && !told_to_stop()) {
      const auto& name = config_.names[random_() % config_.names.size()];
      auto sent = now_ns();
      std::optional<dblock::Lock> lock;
      try {
        lock.emplace(manager_->acquire(name, 2s));
      } catch (const dblock::Error&) {
        continue;
      }
      emit(fmt::format("grant {} {} {} {}", name, lock->token(), sent, now_ns()));
      hold({name, lock->token(), &*lock});
      try {
        lock->release();
      } catch (const dblock::Error&) {
        // lost while paused, or the connection is cut: the lease ends by itself
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(random_() % 100));  // other work: others get a turn
    }
  }

  /// One hold as `dblock run`'s command: the grant is DBLOCK_LOCK_NAME / DBLOCK_FENCING_TOKEN.
  void run_command(const char* name, const char* token) {
    Held held{name, std::atoll(token)};
    emit(fmt::format("grant {} {} {} {}", held.name, held.token, config_.until_ns, now_ns()));
    auto give_up = now_ns() + config_.ttl.count() * 1'000'000;
    while (!store_ && now_ns() < give_up) open_store();
    if (store_) hold(held);
  }

 private:
  /// The nemesis closes the worker's stdin once it has seen enough (bytes come only in pauses).
  static bool told_to_stop() {
    pollfd in{0, POLLIN, 0};
    char byte = 0;
    return poll(&in, 1, 0) > 0 && read(0, &byte, 1) <= 0;
  }

  /// False while the nemesis cuts or stalls the connection.
  bool open_store() {
    try {
      store_ = dblock::Store::open(dblock::test::with_params(config_.server_dsn, "prefix=" + config_.prefix),
                                   {.connect_timeout = 2s, .statement_timeout = 2s});
      return true;
    } catch (const dblock::Error&) {
      std::this_thread::sleep_for(50ms);  // the nemesis's fault lasts a while
      return false;
    }
  }

  void hold(const Held& held) {
    // Phases cycle per worker, from one its seed picks, and its first hold always pauses: three
    // workers hit every phase at once.
    auto phase =
        (pauses_ == 0 && config_.pause_percent > 0) || static_cast<int>(random_() % 100) < config_.pause_percent
            ? kPhases[(config_.seed + pauses_++) % std::size(kPhases)]
            : Phase::none;
    int transactions = phase == Phase::between ? 2 : 1 + static_cast<int>(random_() % 3);
    for (int t = 0; t < transactions; ++t) {
      auto here = t == 0 ? phase : Phase::none;
      if (!write_once(held, here == Phase::between ? Phase::none : here)) break;
      if (here == Phase::between) pause(Phase::between, held);
    }
  }

  /// Blocks until the nemesis, having stopped this process group, hands over a byte and resumes it.
  void pause(Phase phase, const Held& held) {
    emit(fmt::format("pause {} {} {} {} {}", phase_name(phase), held.name, held.token, getpid(), now_ns()));
    char byte = 0;
    if (read(0, &byte, 1) != 1) std::_Exit(0);  // the nemesis is gone
  }

  bool write_once(const Held& held, Phase phase) {
    auto event = [&](const char* what) { emit(fmt::format("{} {} {}", what, held.name, held.token)); };
    if (!config_.fenced) {
      if (held.lock->lost()) {
        event("lost");
        return false;
      }
      if (phase == Phase::before) pause(phase, held);  // between the check and the write
      return write_on_own_connection(held, phase, false, event);
    }
    if (phase == Phase::before) pause(phase, held);
    // Half the writes through the C++ API, half with the SQL fence function on a connection of the
    // application's own: there nothing but the server stands between a resumed COMMIT and the table.
    if (fence_off_ || unbounded_ || random_() % 2 == 0) return write_on_own_connection(held, phase, !fence_off_, event);
    try {
      store_->fenced(dblock::FenceTarget(held.name, held.token), [&](dblock::FencedTransaction& tx) {
        for (auto& statement :
             dblock::test::app_writes::fenced_write(config_.dialect, config_.prefix, held.name, held.token))
          tx.execute(statement.sql, statement.params);
        if (phase == Phase::inside) pause(phase, held);
      });
      event("commit");
      return true;
    } catch (const dblock::LockLost&) {
      event("refused");
    } catch (const std::exception&) {
      event("failed");
    }
    return false;
  }

  template <typename Event>
  bool write_on_own_connection(const Held& held, Phase phase, bool fence, const Event& event) {
    try {
      if (!admin_)
        admin_ = dblock::test::make_admin(config_.dialect, config_.server_dsn,
                                          config_.dialect == "postgresql" ? "public"
                                          : config_.dialect == "mysql"    ? "dblock"
                                                                          : "main",
                                          config_.prefix);
      admin_->exec(dblock::test::app_writes::begin(config_.dialect));
      if (fence) {
        auto call = dblock::test::app_writes::fence_call(config_.dialect, config_.prefix, held.name, held.token);
        if (config_.dialect == "sqlite")
          admin_->exec(call);
        else
          (void)admin_->query(call);
        if (unbounded_ && config_.dialect == "postgresql")
          admin_->exec("SET LOCAL idle_in_transaction_session_timeout = 0; SET LOCAL statement_timeout = 0");
        if (unbounded_ && config_.dialect == "mysql") admin_->exec("SET SESSION idle_transaction_timeout = 0");
      }
      for (auto& sql : dblock::test::app_writes::plain_write(config_.prefix, held.name, held.token)) admin_->exec(sql);
      if (phase == Phase::inside) pause(phase, held);
      admin_->exec("COMMIT");
      event("commit");
      return true;
    } catch (const std::exception& e) {
      admin_.reset();  // the connection rolls the transaction back as it closes
      event(std::string(e.what()).find("dblock fence") != std::string::npos ? "refused" : "failed");
      return false;
    }
  }

  Config config_;
  std::mt19937 random_;
  std::shared_ptr<dblock::Store> store_;
  std::unique_ptr<dblock::LockManager> manager_;
  std::unique_ptr<dblock::test::Admin> admin_;
  std::uint32_t pauses_ = 0;
  // Only to see the test fail: every write on the application's connection, without the fence
  // statement, or with the server's bound on a paused transaction switched off after it.
  bool fence_off_ = std::getenv("DBLOCK_TEST_FENCE_OFF") != nullptr;
  bool unbounded_ = std::getenv("DBLOCK_TEST_FENCE_UNBOUNDED") != nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 9) return 64;
  std::string mode = argv[4];
  Config config{argv[1],
                argv[2],
                argv[3],
                mode != "unfenced",
                static_cast<std::uint32_t>(std::atoll(argv[5])),
                std::atoll(argv[6]),
                std::chrono::milliseconds(std::atoll(argv[7])),
                std::atoi(argv[8]),
                std::vector<std::string>(argv + 9, argv + argc)};
  if (mode == "command") {
    // Under `dblock run`, whose wrapper, guard and this command are the tree the nemesis pauses.
    const char* name = std::getenv("DBLOCK_LOCK_NAME");
    const char* token = std::getenv("DBLOCK_FENCING_TOKEN");
    if (name == nullptr || token == nullptr) return 64;
    try {
      Worker(std::move(config)).run_command(name, token);
    } catch (const std::exception& e) {
      fmt::print(stderr, "write_worker: {}\n", e.what());
      return 70;
    }
    return 0;
  }
  if (config.names.empty()) return 64;
  // The nemesis stops and kills this process's group: it must be a group of its own.
  if (getpgrp() != getpid()) return 65;
  pid_t child = fork();
  if (child < 0) return 71;
  if (child > 0) {
    int status = 0;
    while (waitpid(child, &status, 0) < 0)
      if (errno != EINTR) return 71;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  try {
    Worker(std::move(config)).run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "write_worker: {}\n", e.what());
    return 70;
  }
  return 0;
}
