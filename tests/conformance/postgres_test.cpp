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
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto proxied = dblock::test::with_port(server_dsn, proxy.port());
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
