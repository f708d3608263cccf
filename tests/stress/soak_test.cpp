// Soak: several processes, each with several threads and its own manager, on a mix of hot and cold
// names for a bounded time (DBLOCK_SOAK_SECONDS, default 3). Exclusion and token order are checked
// across processes through counters in shared memory; no lease may be lost while the database is
// healthy; and the resident memory of the process must not grow with the iterations.

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

constexpr int kHotNames = 3;
constexpr int kColdNames = 200;
constexpr int kProcesses = 3;  // this one plus two children
constexpr int kThreads = 4;

struct Shared {  // lives in a MAP_SHARED mapping, visible to every process
  std::atomic<int> inside[kHotNames];
  std::atomic<std::int64_t> last_token[kHotNames];
  std::atomic<std::int64_t> violations;
  std::atomic<std::int64_t> iterations;
};

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> value;
      return value;
    }
  }
  return 0;
}

/// Runs the soak loop in this process; returns the number of leases the managers lost.
std::uint64_t soak(const std::string& dsn, Shared& shared, std::chrono::steady_clock::time_point until,
                   long* rss_early = nullptr, long* rss_late = nullptr) {
  auto store = dblock::Store::open(dsn + "&pool=" + std::to_string(kThreads + 2));
  dblock::LockManager locks(store, {.default_ttl = 3s});
  auto started = std::chrono::steady_clock::now();
  auto span = until - started;
  std::atomic<bool> sampled_early{false};
  std::vector<std::jthread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(getpid() * 31 + t));
      while (std::chrono::steady_clock::now() < until) {
        bool hot = random() % 4 == 0;
        int index = static_cast<int>(random() % (hot ? kHotNames : kColdNames));
        auto name = (hot ? "hot/" : "cold/") + std::to_string(index);
        try {
          auto lock = locks.acquire(name, 20s);
          if (hot) {
            if (shared.inside[index].fetch_add(1) != 0) ++shared.violations;
            if (lock.token() <= shared.last_token[index].load()) ++shared.violations;
            shared.last_token[index] = lock.token();
            std::this_thread::sleep_for(std::chrono::microseconds(random() % 500));
            shared.inside[index].fetch_sub(1);
          }
          lock.release();
          ++shared.iterations;
        } catch (const dblock::Timeout&) {
          ++shared.violations;  // 20 s for a lock held for microseconds: something is wrong
        }
        if (rss_early != nullptr && t == 0 && !sampled_early && std::chrono::steady_clock::now() - started > span / 3) {
          *rss_early = resident_kib();
          sampled_early = true;
        }
      }
    });
  }
  threads.clear();
  if (rss_late != nullptr) *rss_late = resident_kib();
  return locks.stats().lost;
}

class Soak : public ::testing::TestWithParam<dblock::test::BackendCase> {
 protected:
  static void TearDownTestSuite() { dblock::test::remove_embedded_sqlite(); }
};

TEST_P(Soak, ProcessesAndThreadsOnHotAndColdNames) {
  std::string server_dsn;
  DBLOCK_REQUIRE_BACKEND_DSN(server_dsn, GetParam());
  // Migrated before fork, its store dropped: children must not inherit its threads.
  auto dsn = dblock::test::Installation(GetParam(), server_dsn, {.keep_store = false}).dsn();
  auto configured = dblock::test::env_or_empty("DBLOCK_SOAK_SECONDS");
  int seconds = configured.empty() ? 3 : std::max(1, std::atoi(configured.c_str()));
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);

  void* memory = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  auto* shared = new (memory) Shared{};
  std::vector<pid_t> children;
  for (int p = 1; p < kProcesses; ++p) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(soak(dsn, *shared, until) == 0 ? 0 : 1);
    children.push_back(child);
  }
  long rss_early = 0, rss_late = 0;
  auto lost = soak(dsn, *shared, until, &rss_early, &rss_late);
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a child process lost leases or failed";
  }
  EXPECT_EQ(shared->violations.load(), 0) << "exclusion or token order broken across processes";
  EXPECT_EQ(lost, 0u) << "leases were lost while the database was healthy";
  EXPECT_GT(shared->iterations.load(), 100) << "the soak did too little to mean anything";
  std::cout << shared->iterations.load() << " acquisitions in " << seconds << " s; RSS " << rss_early
            << " KiB at a third, " << rss_late << " KiB at the end\n";
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // sanitizers keep freed memory on purpose
  EXPECT_LT(rss_late - rss_early, 4 * 1024) << "resident memory grew by more than 4 MiB over the soak";
#endif
  munmap(memory, sizeof(Shared));
}

INSTANTIATE_TEST_SUITE_P(Backends, Soak,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable, dblock::test::kSqlite})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
