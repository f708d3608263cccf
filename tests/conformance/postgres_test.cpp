// PostgreSQL-specific properties that the shared conformance suite cannot express.

#include <chrono>
#include <string>

#include <dblock/dblock.hpp>
#include <gtest/gtest.h>

#include "support/servers.hpp"
#include "support/tcp_proxy.hpp"

using namespace std::chrono_literals;

namespace {

TEST(Postgres, UncontendedAcquireAndReleaseAreOneRoundTripEach) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  // Count client->server round trips through a loopback proxy in front of the server.
  auto at = server_dsn.find("@127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << "expects a loopback TCP DSN";
  auto port_start = at + 11;
  auto port_end = server_dsn.find('/', port_start);
  auto port = static_cast<std::uint16_t>(std::stoi(server_dsn.substr(port_start, port_end - port_start)));
  dblock::test::TcpProxy proxy(port);
  auto proxied = server_dsn.substr(0, port_start) + std::to_string(proxy.port()) + server_dsn.substr(port_end);
  auto prefix = dblock::test::unique_prefix();
  dblock::migrate(*dblock::Store::open(server_dsn + "?prefix=" + prefix));
  auto store = dblock::Store::open(proxied + "?prefix=" + prefix + "&pool=1");
  dblock::LockManager locks(store, {.default_ttl = 60s});
  locks.try_acquire("warm-up")->release();  // connects and prepares the statements
  constexpr int kCycles = 20;
  proxy.reset_round_trips();
  for (int i = 0; i < kCycles; ++i) {
    auto lock = locks.try_acquire("rt-" + std::to_string(i));
    ASSERT_TRUE(lock);
    EXPECT_EQ(lock->count(), 1);
    lock->release();
  }
  EXPECT_EQ(proxy.round_trips(), 2u * kCycles) << "one round trip to acquire, one to release";
}

}  // namespace
