// SQLite properties the shared suites cannot express: openers racing on a new file, and the
// writers' turns of `writers=queued` (what every write waits for, and what a failed one leaves).

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_groups.hpp"
#include "backends/sqlite/sqlite_locks.hpp"
#include "backends/sqlite/sqlite_session.hpp"
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

/// A migrated database file in a directory of its own, removed at the end.
class MigratedFile {
 public:
  MigratedFile() {
    char pattern[] = "/tmp/dblock-sqlite.XXXXXX";
    dir_ = mkdtemp(pattern);
    path_ = dir_ + "/locks.db";
    auto store = dblock::Store::open("sqlite://" + path_);
    dblock::migrate(*store);
  }
  ~MigratedFile() {
    for (auto suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
    rmdir(dir_.c_str());
  }
  MigratedFile(const MigratedFile&) = delete;
  MigratedFile& operator=(const MigratedFile&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

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

TEST(Sqlite, ACombinedAcquisitionThatFailsMidwayIsRolledBackInItsWritersTurn) {
  // Rolled back at once, not when the failed session is closed later: until then SQLite's write
  // lock would stay held, and the writer handed the turn next would sleep in the busy handler.
  MigratedFile file;
  dblock::detail::SqliteSql sql("dblock_");
  dblock::detail::SqliteWriters writers(1s, true);
  dblock::detail::SqliteSession session(file.path(), 1s, sql, writers);
  session.exec_script(R"(CREATE TRIGGER refuse_b AFTER INSERT ON dblock_locks WHEN NEW.name = 'b'
                         BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;)");
  std::vector<dblock::detail::AcquireRequest> batch{{.name = "a", .owner = "o", .ttl = 60s},
                                                    {.name = "b", .owner = "o", .ttl = 60s}};
  EXPECT_THROW(
      session.guarded_write(
          "acquire", [&] { return session.part<dblock::detail::SqliteLockStatements>().try_acquire_many(batch); }),
      dblock::Error);
  EXPECT_NE(sqlite_api::sqlite3_get_autocommit(session.raw()), 0) << "the failed batch's transaction is still open";
  auto store = dblock::Store::open("sqlite://" + file.path());
  EXPECT_TRUE(store->locks().empty()) << "the batch's first grant was kept";
}

TEST(Sqlite, AWriterMarkingItselfBehindReadersWaitsForItsTurnLikeEveryOtherWrite) {
  // Polling a name the readers hold, a waiting writer marks itself in the holders table: a write,
  // so with writers=queued it takes its turn (here: longer than the busy timeout, so it is refused
  // as SQLite's own busy answer would be), rather than meeting the turn's holder in SQLite.
  constexpr auto kBusyTimeout = 150ms;
  MigratedFile file;
  dblock::detail::SqliteSql sql("dblock_");
  dblock::detail::SqliteWriters writers(kBusyTimeout, true);
  dblock::detail::SessionPool<dblock::detail::SqliteSession> pool(
      [&] { return std::make_unique<dblock::detail::SqliteSession>(file.path(), kBusyTimeout, sql, writers); },
      "sqlite://" + file.path(), 2, kBusyTimeout);
  auto groups = dblock::detail::make_sqlite_groups(pool);
  ASSERT_TRUE(groups->try_acquire_member("shared", "reader", dblock::HolderKind::shared, 0, 60s, 0));
  std::string refused;
  bool marked = false;
  {
    auto held = writers.turn("acquire", file.path());
    std::thread waiting_writer([&] {
      try {
        groups->lease_left_marking_writer("shared", "writer", 1s, marked);
      } catch (const dblock::detail::TransientError& e) {
        refused = e.what();
      }
    });
    waiting_writer.join();
  }
  EXPECT_NE(refused.find("marking a waiting writer on sqlite://"), std::string::npos) << refused;
  EXPECT_FALSE(marked);
  // Its turn come, it marks itself.
  EXPECT_TRUE(groups->lease_left_marking_writer("shared", "writer", 1s, marked));
  EXPECT_TRUE(marked);
}

}  // namespace
