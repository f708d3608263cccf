// PostgreSQL-specific properties that the shared conformance suite cannot express.

#include <chrono>
#include <string>

#include <dblock/dblock.hpp>
#include <gtest/gtest.h>

#include "support/servers.hpp"
#include "support/tcp_proxy.hpp"

using namespace std::chrono_literals;

namespace {

/// Client->server round trips of `cycles` uncontended acquire+release cycles after a warm-up.
std::size_t round_trips_of_cycles(dblock::LockMode mode, int cycles) {
  std::string server_dsn = dblock::test::env_or_empty("DBLOCK_TEST_PG_DSN");
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto proxied = dblock::test::with_port(server_dsn, proxy.port());
  auto prefix = dblock::test::unique_prefix();
  dblock::migrate(*dblock::Store::open(server_dsn + "?prefix=" + prefix));
  auto store = dblock::Store::open(proxied + "?prefix=" + prefix + "&pool=1");
  dblock::LockManager locks(store, {.mode = mode, .default_ttl = 60s});
  locks.try_acquire(fmt::format("warm-up/{}", getpid()))->release();  // connects and prepares
  proxy.reset_round_trips();
  for (int i = 0; i < cycles; ++i) {
    auto lock = locks.try_acquire(fmt::format("rt-{}/{}", getpid(), i));
    EXPECT_TRUE(lock);
    if (!lock) break;
    EXPECT_EQ(lock->count(), 1);
    lock->release();
  }
  return proxy.round_trips();
}

TEST(Postgres, AdvisoryAcquireAndReleaseAreOneRoundTripEach) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  EXPECT_EQ(round_trips_of_cycles(dblock::LockMode::advisory, 20), 40u)
      << "advisory mode: pg_try_advisory_lock with its token, then pg_advisory_unlock";
}

TEST(Postgres, UncontendedAcquireAndReleaseAreOneRoundTripEach) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  // Counted through a loopback proxy in front of the server.
  EXPECT_EQ(round_trips_of_cycles(dblock::LockMode::table, 20), 40u) << "one round trip to acquire, one to release";
}

}  // namespace
