// Network faults between the library and its server (PostgreSQL, MariaDB), through a loopback TCP proxy that cuts every
// connection and refuses new ones while "down": calls fail with ConnectionError within the
// configured timeouts instead of hanging, a grant is only ever reported when the row really is
// ours, the pool recovers by itself, and nothing stays renewed after the chaos.

#include <atomic>
#include <iostream>
#include <chrono>
#include <random>
#include <thread>

#include <dblock/dblock.hpp>
#include <gtest/gtest.h>

#include "support/admin.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"
#include "support/tcp_proxy.hpp"

using namespace std::chrono_literals;

namespace {

class Faults : public ::testing::TestWithParam<dblock::test::BackendCase> {};

TEST_P(Faults, ConnectionsCutMidStatementNeverFakeAGrantNorHang) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  dblock::test::Installation installation(GetParam(), server_dsn, {.keep_store = false});
  const auto& prefix = installation.prefix();
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto store = dblock::Store::open(installation.dsn_on(dblock::test::with_port(server_dsn, proxy.port()), "pool=4"),
                                   {.connect_timeout = 2s});
  dblock::LockManager locks(store, {.default_ttl = 900ms});

  std::atomic<bool> chaos{true};
  std::atomic<int> grants{0}, verified{0}, refused{0}, failures{0}, unexpected{0}, slow{0};
  std::jthread chaos_monkey([&] {
    std::mt19937 random(7);
    auto until = std::chrono::steady_clock::now() + 4s;
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + random() % 60));
      proxy.set_down(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + random() % 60));
      proxy.set_down(false);
    }
    chaos = false;
  });
  std::vector<std::jthread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      // Its own direct connection: a driver connection serves one thread at a time.
      auto admin = dblock::test::make_admin(GetParam().dialect, server_dsn, dblock::test::default_schema(GetParam()),
                                            prefix);
      std::mt19937 random(static_cast<unsigned>(t));
      while (chaos) {
        auto name = "fault/" + std::to_string(random() % 5);
        auto started = std::chrono::steady_clock::now();
        try {
          auto lock = locks.try_acquire(name);
          if (std::chrono::steady_clock::now() - started > 10s) ++slow;
          if (!lock) {
            ++refused;
            continue;
          }
          ++grants;
          // Read the row through a direct connection: a reported grant must be real.
          auto owner = admin->query("SELECT owner || ' ' || token FROM \"" + prefix + "locks\" WHERE name = '" +
                                    name + "'");
          if (std::chrono::steady_clock::now() - started < 300ms) {
            EXPECT_EQ(owner, std::vector<std::string>{locks.owner_id() + " " + std::to_string(lock->token())})
                << "a grant was reported that the database does not show";
            ++verified;
          }
          lock->release();
        } catch (const dblock::ConnectionError&) {
          ++failures;  // the documented answer while the network is down
        } catch (const dblock::LockLost&) {
          ++failures;  // the lease lapsed while renewals could not get through
        } catch (const std::exception& e) {
          ++unexpected;
          ADD_FAILURE() << e.what();
        }
        if (std::chrono::steady_clock::now() - started > 10s) ++slow;
      }
    });
  }
  workers.clear();
  std::cout << "grants " << grants << " (verified " << verified << "), busy " << refused << ", connection failures "
            << failures << "\n";
  EXPECT_EQ(slow, 0) << "a call hung beyond the configured timeouts";
  EXPECT_EQ(unexpected, 0);
  EXPECT_GT(failures, 0) << "the chaos must have hit some calls";
  EXPECT_GT(verified, 0) << "and some grants must have come through and been checked";

  // The pool replaced its broken sessions: every slot works again.
  std::vector<dblock::Lock> held;
  for (int i = 0; i < 6; ++i) {
    std::optional<dblock::Lock> lock;
    for (int attempt = 0; attempt < 3 && !lock; ++attempt) {
      try {
        lock = locks.try_acquire("after-chaos/" + std::to_string(i));
      } catch (const dblock::ConnectionError&) {  // a session broken during the chaos, now replaced
      }
    }
    ASSERT_TRUE(lock) << "the store did not recover";
    held.push_back(std::move(*lock));
  }
  held.clear();
  // Grants whose reply was lost are never renewed: they lapse with their lease.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (store->census().held > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(store->census().held, 0) << "a lock stayed held after the chaos";
}

TEST_P(Faults, AStalledConnectionFailsWithinTheStatementTimeout) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  dblock::test::Installation installation(GetParam(), server_dsn, {.keep_store = false});
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto store = dblock::Store::open(installation.dsn_on(dblock::test::with_port(server_dsn, proxy.port()), "pool=2"),
                                   {.connect_timeout = 2s, .statement_timeout = 1s});
  dblock::LockManager locks(store, {.default_ttl = 3s});
  locks.try_acquire("warm-up")->release();

  proxy.set_stalled(true);  // the server's replies stop arriving; the sockets stay open
  auto started = std::chrono::steady_clock::now();
  EXPECT_THROW((void)locks.try_acquire("stalled"), dblock::ConnectionError);
  auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, 1s);
  EXPECT_LT(waited, 6s) << "the call must give up after the statement timeout (and one resolution read)";

  proxy.set_stalled(false);
  std::optional<dblock::Lock> lock;
  for (int attempt = 0; attempt < 3 && !lock; ++attempt) {
    try {
      lock = locks.try_acquire("after-stall");
    } catch (const dblock::ConnectionError&) {  // a session the stall left behind, now dropped
    }
  }
  EXPECT_TRUE(lock) << "the abandoned session was replaced";
}

// A reader whose renewals fail while its group lives (another reader holds the name) is lost, its
// membership lapses and the reaper deletes it; its owner then takes the membership afresh. The lost
// guard's release must not delete the new membership: a writer would be let in beside the reader who
// holds it. The new row has a token of its own (schema 13), so the release misses it; when a reader's
// token was its group's epoch, it carried the same one.
TEST_P(Faults, ALostReadersReleaseLeavesTheMembershipItsOwnerTookAfresh) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  dblock::test::Installation installation(GetParam(), server_dsn);
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto through_proxy =
      dblock::Store::open(installation.dsn_on(dblock::test::with_port(server_dsn, proxy.port()), "pool=2"),
                          {.connect_timeout = 2s, .statement_timeout = 1s});
  dblock::LockManager owner(through_proxy, {.default_ttl = 900ms});
  dblock::LockManager other(installation.store(), {.default_ttl = 60s});
  dblock::LockManager writer(installation.store());
  const dblock::LockOptions reader{.shared = true};
  auto memberships_of_owner = [&] {
    std::vector<dblock::LockInfo> rows;
    for (auto& row : installation.store()->locks())
      if (row.name == "lapsed-reader" && row.owner == owner.owner_id()) rows.push_back(row);
    return rows;
  };
  auto keeper = other.try_acquire("lapsed-reader", reader);
  ASSERT_TRUE(keeper) << "the other reader keeps the group alive";
  auto lapsed = owner.try_acquire("lapsed-reader", reader);
  ASSERT_TRUE(lapsed);
  EXPECT_NE(lapsed->token(), keeper->token()) << "every reader has a token of its own";

  proxy.set_down(true);  // the owner's renewals fail from now on
  ASSERT_TRUE(dblock::test::eventually([&] { return lapsed->lost(); }, 5s)) << "its local deadline passes";
  ASSERT_TRUE(dblock::test::eventually([&] {
    auto rows = memberships_of_owner();
    // Below zero: "0 ms left" may still be a few microseconds before the expiry the reaper checks.
    return rows.size() == 1 && rows[0].remaining.count() < 0;
  })) << "its membership lapses";
  dblock::Reaper reaper(installation.store());
  EXPECT_GE(reaper.run_once().rows, 1u);
  ASSERT_TRUE(memberships_of_owner().empty()) << "the reaper deleted the lapsed membership";
  proxy.set_down(false);

  std::optional<dblock::Lock> afresh;
  for (int attempt = 0; attempt < 3 && !afresh; ++attempt) {
    try {
      afresh = owner.try_acquire("lapsed-reader", reader);
    } catch (const dblock::ConnectionError&) {  // a session the cut left behind, now dropped
    }
  }
  ASSERT_TRUE(afresh) << "the owner takes the membership afresh";
  EXPECT_NE(afresh->token(), lapsed->token()) << "a membership taken afresh after it was reaped: a new token";
  EXPECT_THROW(lapsed->release(), dblock::LockLost);
  auto rows = memberships_of_owner();
  ASSERT_EQ(rows.size(), 1u) << "the lost guard's release deleted the membership taken afresh";
  EXPECT_EQ(rows[0].count, 1);
  keeper->release();
  EXPECT_FALSE(writer.try_acquire("lapsed-reader")) << "a writer beside a reader who believes";
  EXPECT_FALSE(afresh->lost());
  afresh->release();
  EXPECT_TRUE(writer.try_acquire("lapsed-reader")) << "the name is free once the reader gives it back";
}

INSTANTIATE_TEST_SUITE_P(Backends, Faults, ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable, dblock::test::kMysqlTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
