// The reaper sidecar as an operator runs it: endpoints scraped over loopback, SIGTERM, and a
// database that goes away and comes back.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <dblock/dblock.hpp>
#include <gtest/gtest.h>
#include <httplib.h>

#include "support/admin.hpp"
#include "support/build_paths.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"
#include "support/tcp_proxy.hpp"

using namespace std::chrono_literals;
/// The sidecar retries with backoff: give it longer than the default.
template <class Predicate>
bool sidecar_eventually(Predicate predicate) {
  return dblock::test::eventually(predicate, 15s);
}

namespace {

class Sidecar {
 public:
  Sidecar(const std::string& dsn, std::uint16_t port, const std::vector<std::string>& extra = {})
      : client_("127.0.0.1", port) {
    std::vector<std::string> args{DBLOCK_CLI_PATH, "--dsn", dsn, "--log-level", "warn", "reaper", "--listen",
                                  "127.0.0.1:" + std::to_string(port), "--interval", "100ms"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    client_.set_connection_timeout(1, 0);
    client_.set_read_timeout(5, 0);
  }
  ~Sidecar() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  int status(const std::string& path) {
    auto response = client_.Get(path);
    return response ? response->status : -1;
  }
  std::string body(const std::string& path) {
    auto response = client_.Get(path);
    return response ? response->body : "";
  }
  /// SIGTERM, then the exit code, or -1 when it did not exit within the bound.
  int terminate(std::chrono::milliseconds limit = 10s) {
    kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  httplib::Client client_;
};

TEST(ReaperSidecar, ServesMetricsAndHealthReapsAndStopsOnSigterm) {
  dblock::test::Installation installation("sqlite", "sqlite://" + dblock::test::embedded_sqlite_path());
  auto dsn = installation.dsn();
  const auto& store = installation.store();
  installation.admin().insert_expired("stale/", 7);
  dblock::LockManager locks(store, {.default_ttl = 60s});
  auto live = locks.try_acquire("live");
  ASSERT_TRUE(live);

  auto port = dblock::test::free_port();
  Sidecar sidecar(dsn, port);
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 200; })) << "sidecar never became healthy";
  ASSERT_TRUE(sidecar_eventually([&] {
    return sidecar.body("/metrics").find("dblock_reaper_rows_reaped_total 7\n") != std::string::npos;
  })) << sidecar.body("/metrics");
  auto metrics = sidecar.body("/metrics");
  for (const char* expected :
       {"# TYPE dblock_reaper_rows_reaped_total counter", "# TYPE dblock_reaper_cycles_total counter",
        "dblock_reaper_failures_total 0", "# TYPE dblock_reaper_cycle_duration_seconds histogram",
        "dblock_reaper_cycle_duration_seconds_bucket{le=\"+Inf\"}", "dblock_locks_held 1", "dblock_locks_expired 0",
        "# TYPE dblock_oldest_held_lock_age_seconds gauge", "dblock_database_up 1"})
    EXPECT_NE(metrics.find(expected), std::string::npos) << expected << "\n" << metrics;
  EXPECT_EQ(store->locks().size(), 1u) << "the live lock stays";
  EXPECT_EQ(sidecar.terminate(), 0) << "SIGTERM must stop it cleanly and promptly";
  dblock::test::remove_embedded_sqlite();
}

TEST(ReaperSidecar, ASecondSidecarOnABusyAddressExits71NamingIt) {
  auto dsn =
      dblock::test::Installation("sqlite", "sqlite://" + dblock::test::embedded_sqlite_path(), {.keep_store = false})
          .dsn();
  auto port = dblock::test::free_port();
  Sidecar first(dsn, port);
  ASSERT_TRUE(sidecar_eventually([&] { return first.status("/healthz") == 200; }));
  auto address = fmt::format("127.0.0.1:{}", port);
  auto output = fmt::format("/tmp/dblock-second-reaper-{}.log", getpid());
  // Bounded: a second sidecar that shares the port (SO_REUSEPORT) would serve on and never exit.
  int second = std::system(fmt::format("timeout 10 '{}' --dsn '{}' reaper --listen {} --interval 100ms > '{}' 2>&1",
                                       DBLOCK_CLI_PATH, dsn, address, output)
                               .c_str());
  std::ifstream in(output);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(output.c_str());
  EXPECT_EQ(WEXITSTATUS(second), 71) << text;
  EXPECT_NE(text.find(address), std::string::npos) << text;
  EXPECT_EQ(first.status("/healthz"), 200) << "the first one keeps serving";
  dblock::test::remove_embedded_sqlite();
}

TEST(ReaperSidecar, ReportsTheDatabaseDownAndRecoversWhenItComesBack) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  dblock::test::Installation installation("postgresql", server_dsn, {.keep_store = false});
  auto* admin = &installation.admin();

  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn), /*start_down=*/true);
  auto proxied = installation.dsn_on(dblock::test::with_port(server_dsn, proxy.port()));
  auto port = dblock::test::free_port();
  Sidecar sidecar(proxied, port, {"--unhealthy-after", "2"});

  // Down from the start: the sidecar keeps retrying and says so.
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 503; })) << "never reported unhealthy";
  EXPECT_NE(sidecar.body("/metrics").find("dblock_database_up 0"), std::string::npos);
  proxy.set_down(false);
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 200; })) << "never recovered";
  admin->insert_expired("after-outage/", 4);
  ASSERT_TRUE(sidecar_eventually(
      [&] { return sidecar.body("/metrics").find("dblock_reaper_rows_reaped_total 4\n") != std::string::npos; }));

  // Down while running: pooled sessions break, cycles fail, then it reconnects by itself.
  proxy.set_down(true);
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 503; })) << "outage not reported";
  proxy.set_down(false);
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 200; })) << "did not reconnect";
  admin->insert_expired("after-second-outage/", 2);
  ASSERT_TRUE(sidecar_eventually(
      [&] { return sidecar.body("/metrics").find("dblock_reaper_rows_reaped_total 6\n") != std::string::npos; }));
  EXPECT_EQ(sidecar.terminate(), 0);
}

// A DSN that Store::open refuses (an unknown scheme, a bad parameter) is bad input: exit 64 with the
// reason. It used to leave the sidecar hanging with its listener up, /healthz answering "ok".
TEST(ReaperSidecar, ADsnTheStoreRefusesEndsTheSidecarWith64NotAHangingListener) {
  for (std::string dsn : {"nosuch://x", "sqlite:///tmp/dblock-reaper-bad-dsn.db?prefix=a-b"}) {
    auto output = fmt::format("/tmp/dblock-reaper-bad-dsn-{}.log", getpid());
    int status = std::system(fmt::format("timeout -k 2 20 '{}' --dsn '{}' reaper --listen 127.0.0.1:{} > '{}' 2>&1",
                                         DBLOCK_CLI_PATH, dsn, dblock::test::free_port(), output)
                                 .c_str());
    std::ifstream in(output);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::remove(output.c_str());
    EXPECT_EQ(WEXITSTATUS(status), 64) << dsn << ": " << text;
    EXPECT_NE(text.find("is invalid"), std::string::npos) << dsn << ": " << text;
  }
  std::remove("/tmp/dblock-reaper-bad-dsn.db");
}

TEST(ReaperSidecar, OnceExitsWithTheOutcome) {
  auto dsn =
      dblock::test::Installation("sqlite", "sqlite://" + dblock::test::embedded_sqlite_path(), {.keep_store = false})
          .dsn();
  int ok = std::system(fmt::format("'{}' --dsn '{}' reaper --once > /dev/null 2>&1", DBLOCK_CLI_PATH, dsn).c_str());
  EXPECT_EQ(WEXITSTATUS(ok), 0);
  int unreachable = std::system(
      fmt::format("'{}' --dsn 'postgresql://u:pw@127.0.0.1:1/db' reaper --once > /dev/null 2>&1", DBLOCK_CLI_PATH)
          .c_str());
  EXPECT_EQ(WEXITSTATUS(unreachable), dblock::test::is_built("postgresql") ? 69 : 64) << "unreachable, or not built";
  int bad_listen = std::system(
      fmt::format("'{}' --dsn '{}' reaper --listen nonsense > /dev/null 2>&1", DBLOCK_CLI_PATH, dsn).c_str());
  EXPECT_EQ(WEXITSTATUS(bad_listen), 64);
  dblock::test::remove_embedded_sqlite();
}

}  // namespace
