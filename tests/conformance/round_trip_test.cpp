// The cost contract the shared conformance suite cannot express: an uncontended acquire and its
// release are one client->server round trip each, counted through a loopback proxy in front of
// the server, on every server backend and mode.

#include <chrono>
#include <string>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/installation.hpp"
#include "support/servers.hpp"
#include "support/tcp_proxy.hpp"

using namespace std::chrono_literals;

namespace {

class RoundTrips : public ::testing::TestWithParam<dblock::test::BackendCase> {};

TEST_P(RoundTrips, UncontendedAcquireAndReleaseAreOneRoundTripEach) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto proxied = dblock::test::with_port(server_dsn, proxy.port());
  dblock::test::Installation installation(GetParam(), server_dsn, {.keep_store = false});
  auto store = dblock::Store::open(installation.dsn_on(proxied, "pool=1"));
  dblock::LockManager locks(store, {.mode = GetParam().mode, .default_ttl = 60s});
  locks.try_acquire(fmt::format("warm-up/{}", getpid()))->release();  // connects and prepares
  proxy.reset_round_trips();
  constexpr int kCycles = 20;
  for (int i = 0; i < kCycles; ++i) {
    auto lock = locks.try_acquire(fmt::format("rt-{}/{}", getpid(), i));
    ASSERT_TRUE(lock);
    EXPECT_EQ(lock->count(), 1);
    lock->release();
  }
  // Table mode: the upsert, then the release; advisory mode: the try-lock drawing its token, then
  // the unlock (PostgreSQL pg_try_advisory_lock / pg_advisory_unlock, MySQL GET_LOCK / RELEASE_LOCK).
  EXPECT_EQ(proxy.round_trips(), 2u * kCycles);
}

/// Groups (table mode): a permit and a read lock cost what a lock costs, also when the name's group
/// already has members: one round trip to take, one to give back.
class GroupRoundTrips : public RoundTrips {};

TEST_P(GroupRoundTrips, APermitAndAReadLockAreOneRoundTripEachWay) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto proxied = dblock::test::with_port(server_dsn, proxy.port());
  dblock::test::Installation installation(GetParam(), server_dsn);
  const auto& direct = installation.store();
  dblock::LockManager others(direct, {.default_ttl = 60s});
  auto other_permit = others.try_acquire("pool", {.permits = 3});  // members already there
  auto other_reader = others.try_acquire("table", {.shared = true});
  ASSERT_TRUE(other_permit && other_reader);
  auto store = dblock::Store::open(installation.dsn_on(proxied, "pool=1"));
  dblock::LockManager locks(store, {.default_ttl = 60s});
  locks.try_acquire("warm-up")->release();  // connects and prepares
  locks.try_acquire("warm-up", {.permits = 1})->release();
  locks.try_acquire("warm-up", {.shared = true})->release();
  proxy.reset_round_trips();
  constexpr int kCycles = 10;
  for (int i = 0; i < kCycles; ++i) {
    for (auto options : {dblock::LockOptions{.permits = 3}, dblock::LockOptions{.shared = true}}) {
      auto lock = locks.try_acquire(options.shared ? "table" : "pool", options);
      ASSERT_TRUE(lock);
      lock->release();
    }
    for (auto options : {dblock::LockOptions{.permits = 3}, dblock::LockOptions{.shared = true}}) {
      auto lock = locks.try_acquire(fmt::format("fresh-{}-{}", options.shared ? "r" : "p", i), options);
      ASSERT_TRUE(lock) << "a group of its own";
      lock->release();
    }
  }
  EXPECT_EQ(proxy.round_trips(), 2u * 4 * kCycles);
}

/// Issue 32: a fenced transaction costs one statement more than the same one unfenced, and no
/// round trip more: BEGIN goes with the fence (PostgreSQL pipelines them; MySQL's fence_begin is
/// both), then COMMIT.
class FenceRoundTrips : public RoundTrips {};

TEST_P(FenceRoundTrips, AnEmptyFencedTransactionIsTwoRoundTripsBeginWithTheFenceAndCommit) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto proxied = dblock::test::with_port(server_dsn, proxy.port());
  dblock::test::Installation installation(GetParam(), server_dsn, {.keep_store = false});
  auto store = dblock::Store::open(installation.dsn_on(proxied, "pool=1"));
  dblock::LockManager locks(store, {.default_ttl = 60s});
  auto lock = locks.try_acquire(fmt::format("fence-rt/{}", getpid()));
  ASSERT_TRUE(lock);
  store->fenced(*lock, [](dblock::FencedTransaction&) {});  // prepares the fence
  proxy.reset_round_trips();
  constexpr int kTransactions = 10;
  for (int i = 0; i < kTransactions; ++i) store->fenced(*lock, [](dblock::FencedTransaction&) {});
  EXPECT_EQ(proxy.round_trips(), 2u * kTransactions);
  lock->release();
}

INSTANTIATE_TEST_SUITE_P(
    Backends, RoundTrips,
    ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable, dblock::test::kPostgresAdvisory,
                                             dblock::test::kMysqlTable, dblock::test::kMysqlAdvisory})),
    [](const auto& info) { return std::string(info.param.label); });

INSTANTIATE_TEST_SUITE_P(Backends, GroupRoundTrips,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable})),
                         [](const auto& info) { return std::string(info.param.label); });

INSTANTIATE_TEST_SUITE_P(Backends, FenceRoundTrips,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
