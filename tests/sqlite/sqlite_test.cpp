// SQLite properties the shared suites cannot express: openers racing on a new file.

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <dblock/dblock.hpp>
#include <gtest/gtest.h>

#include "backends/sqlite/sqlite_writers.hpp"

using namespace std::chrono_literals;

namespace {

/// Bytes 18 and 19 of an SQLite file's header are 2 once it is in WAL mode.
bool in_wal_mode(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::array<char, 20> header{};
  if (!file.read(header.data(), header.size())) return false;
  return header[18] == 2 && header[19] == 2;
}

TEST(Sqlite, ProcessesRacingToOpenANewFileAllOpenItInWalMode) {
  // Two openers of a new file race to switch it to WAL, and SQLite answers the loser SQLITE_BUSY
  // without calling its busy handler: the open must be tried again, not fail.
  constexpr int kRounds = 15;
  constexpr int kOpeners = 8;
  char pattern[] = "/tmp/dblock-sqlite.XXXXXX";
  std::string dir = mkdtemp(pattern);
  int failed_opens = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto path = dir + "/race-" + std::to_string(round) + ".db";
    std::array<int, 2> go{};
    ASSERT_EQ(pipe(go.data()), 0);
    std::vector<pid_t> children;
    for (int i = 0; i < kOpeners; ++i) {
      pid_t child = fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        close(go[1]);
        char byte = 0;
        if (read(go[0], &byte, 1) != 0) _exit(3);  // every opener starts when the pipe closes
        try {
          auto store = dblock::Store::open("sqlite://" + path, {.connect_timeout = 5s});
          _exit(0);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "open failed: %s\n", e.what());
          _exit(1);
        }
      }
      children.push_back(child);
    }
    close(go[0]);
    close(go[1]);
    for (auto child : children) {
      int status = 0;
      ASSERT_EQ(waitpid(child, &status, 0), child);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed_opens;
    }
    EXPECT_TRUE(in_wal_mode(path)) << path;
    for (auto suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  }
  EXPECT_EQ(failed_opens, 0) << "of " << kRounds * kOpeners << " opens";
  rmdir(dir.c_str());
}

TEST(Sqlite, AWriterQueuedBehindThisProcesssOtherWritersPastTheBusyTimeoutIsToldTheFileIsBusy) {
  // The writers of one backend take turns before SQLite's busy handler: a turn waits as long as
  // SQLite itself would (the busy timeout), then fails as SQLite's busy answer does.
  constexpr auto kBusyTimeout = 100ms;
  dblock::detail::SqliteWriters writers(kBusyTimeout, true);
  std::string refused;
  std::chrono::steady_clock::duration waited{};
  {
    auto first = writers.turn("acquire", "/tmp/x.db");
    std::thread second([&] {
      auto started = std::chrono::steady_clock::now();
      try {
        auto turn = writers.turn("release", "/tmp/x.db");
      } catch (const dblock::detail::TransientError& e) {
        refused = e.what();
      }
      waited = std::chrono::steady_clock::now() - started;
    });
    second.join();
  }
  EXPECT_NE(refused.find("release on sqlite:///tmp/x.db: database is locked"), std::string::npos) << refused;
  EXPECT_GE(waited, kBusyTimeout);
  // The refused writer left the queue: the turn, given back, is free for the next writer at once.
  std::thread third([&] { EXPECT_NO_THROW(auto turn = writers.turn("acquire", "/tmp/x.db")); });
  third.join();
}

}  // namespace
