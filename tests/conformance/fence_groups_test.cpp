// Fences of several locks and of groups' members (migration 0010; Store::fenced with a LockSet or
// several targets, FenceTarget of a permit or a reader; doc/semantics.md "Fence"), on every
// table-mode backend: a lock set is fenced as a whole and bounded by its smallest lease, a reader's
// fence does not block another reader's, a writer is not granted while a reader's fenced
// transaction is open, and a member that lapsed or left is refused.

#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

namespace {

constexpr dblock::LockOptions kShared{.shared = true};

class FenceGroups : public dblock::test::InstalledCaseTest {
 protected:
  void SetUp() override {
    InstalledCaseTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;  // no server: the base skipped or failed already
    auto& prefix = installation_->prefix();
    dialect_ = GetParam().dialect;
    if (dialect_ == "postgresql") {
      data_ = fmt::format("\"{}fence_group_data\"", prefix);
      installation_->admin().exec(fmt::format("CREATE TABLE {} (name text, token bigint, note text)", data_));
    } else if (dialect_ == "mysql") {
      data_ = fmt::format("`{}fence_group_data`", prefix);
      installation_->admin().exec(
          fmt::format("CREATE TABLE {} (name VARCHAR(255), token BIGINT, note VARCHAR(64)) ENGINE = InnoDB", data_));
    } else {
      data_ = fmt::format("\"{}fence_group_data\"", prefix);
      installation_->admin().exec(fmt::format("CREATE TABLE {} (name TEXT, token INTEGER, note TEXT)", data_));
    }
  }
  void TearDown() override {
    if (installation_) installation_->admin().exec(fmt::format("DROP TABLE {}", data_));
  }

  [[nodiscard]] std::string insert(const std::string& name, std::int64_t token, const std::string& note) const {
    return fmt::format("INSERT INTO {} (name, token, note) VALUES ('{}', {}, '{}')", data_, name, token, note);
  }
  [[nodiscard]] std::int64_t rows_noted(const std::string& note) const {
    return std::stoll(
        installation_->admin().query(fmt::format("SELECT count(*) FROM {} WHERE note = '{}'", data_, note)).at(0));
  }
  [[nodiscard]] std::unique_ptr<dblock::test::Admin> app_connection() const {
    return dblock::test::make_admin(GetParam().dialect, dblock::test::admin_dsn(GetParam(), server_dsn_),
                                    dblock::test::default_schema(GetParam()), installation_->prefix());
  }
  /// A reader's membership taken through the SQL contract's acquire_member and never renewed (a
  /// reader that paused right after its grant): its token.
  std::int64_t paused_reader(const std::string& name, const std::string& owner, std::chrono::milliseconds ttl) {
    auto& admin = installation_->admin();
    auto& prefix = installation_->prefix();
    if (dialect_ == "postgresql")
      return std::stoll(admin
                            .query(fmt::format("SELECT lock_token FROM \"public\".\"{}acquire_member\"('{}', '{}', "
                                               "'shared', 0, {}, 0)",
                                               prefix, name, owner, ttl.count()))
                            .at(0));
    auto reply = admin
                     .query(fmt::format("SELECT `{}acquire_member`('{}', '{}', 'shared', 0, {}, 0)", prefix, name,
                                        owner, ttl.count() * 1000))
                     .at(0);
    return std::stoll(reply.substr(reply.find(' ') + 1));
  }
  /// The documented member fence (doc/sql-contract.md) on the application's connection.
  void fence_member(dblock::test::Admin& app, const std::string& name, const std::string& owner,
                    std::int64_t token) const {
    if (std::getenv("DBLOCK_TEST_FENCE_OFF") != nullptr) return;  // only to see the tests fail without the fence
    auto& prefix = installation_->prefix();
    if (dialect_ == "postgresql")
      (void)app.query(
          fmt::format("SELECT \"public\".\"{}fence_member\"('{}', '{}', 'shared', {})", prefix, name, owner, token));
    else if (dialect_ == "mysql")
      (void)app.query(fmt::format("SELECT `{}fence_member`('{}', '{}', 'shared', {})", prefix, name, owner, token));
    else
      app.exec(
          fmt::format("INSERT INTO \"{}fence_member\" (name, owner, kind, token) VALUES ('{}', '{}', 'shared', {})",
                      prefix, name, owner, token));
  }

  std::string dialect_;
  std::string data_;
};

TEST_P(FenceGroups, ALockSetIsFencedAsAWholeBoundedByItsSmallestLeaseAndRefusedWhenAnyLockIsLost) {
  auto holder = manager(dblock::ManagerOptions{.default_ttl = 30s, .renew_interval = 400ms});
  // The shortest lease sorts first: the last fence run is not the one that bounds the transaction.
  auto a_short = holder->acquire("set/a", 5s, dblock::LockOptions{.ttl = 1500ms});
  auto set = holder->acquire_all({"set/b", "set/c"}, 5s, dblock::LockOptions{.ttl = 30s});
  std::vector<dblock::FenceTarget> targets{dblock::FenceTarget(set.at("set/c")), dblock::FenceTarget(a_short),
                                           dblock::FenceTarget(set.at("set/b"))};
  store_->fenced(targets, [&](dblock::FencedTransaction& tx) {
    tx.execute(insert("set", 0, "all-three"));
    if (dialect_ == "sqlite") return;  // no server bound on SQLite
    EXPECT_LE(tx.lease_left().value_or(0ms), 1500ms) << "the bound is not the smallest lease of the set";
    if (dialect_ == "postgresql") {
      auto idle = tx.query("SELECT setting FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'")
                      .at(0)
                      .at(0)
                      .value_or("0");
      EXPECT_LE(std::stoll(idle), 1500) << "the server would keep a paused transaction past set/a's lease";
      EXPECT_GT(std::stoll(idle), 0);
    } else {
      auto idle = tx.query("SELECT @@SESSION.idle_transaction_timeout").at(0).at(0).value_or("0");
      EXPECT_LE(std::stoll(idle), 2) << "the server would keep a paused transaction past set/a's lease";
      EXPECT_GT(std::stoll(idle), 0);
    }
  });
  EXPECT_EQ(rows_noted("all-three"), 1);

  store_->fenced(set, [&](dblock::FencedTransaction& tx) { tx.execute(insert("set", 0, "the-set")); });
  EXPECT_EQ(rows_noted("the-set"), 1);

  ASSERT_TRUE(store_->revoke("set/c"));
  EXPECT_THROW(
      store_->fenced(set, [&](dblock::FencedTransaction& tx) { tx.execute(insert("set", 0, "after-revoke")); }),
      dblock::LockLost);
  EXPECT_THROW(
      store_->fenced({dblock::FenceTarget("set/b", set.at("set/b").token()), dblock::FenceTarget("set/a", 1 << 30)},
                     [&](dblock::FencedTransaction& tx) { tx.execute(insert("set", 0, "stale-a")); }),
      dblock::LockLost);
  EXPECT_EQ(rows_noted("after-revoke") + rows_noted("stale-a"), 0);
  EXPECT_THROW(store_->fenced({dblock::FenceTarget(a_short), dblock::FenceTarget(a_short)}, [](auto&) {}),
               dblock::InvalidArgument);
}

TEST_P(FenceGroups, AReadersAndAPermitsFenceCommitWhileLiveAndAreRefusedOnceTheMembershipEnded) {
  auto a = manager();
  auto b = manager();
  auto reader = a->acquire("rw/doc", 5s, kShared);
  auto other_reader = b->acquire("rw/doc", 5s, kShared);
  store_->fenced(reader,
                 [&](dblock::FencedTransaction& tx) { tx.execute(insert("rw/doc", reader.token(), "reader")); });
  EXPECT_EQ(rows_noted("reader"), 1);
  // A plain fence with the reader's token is a group's row: refused, as before.
  EXPECT_THROW(store_->fenced(dblock::FenceTarget("rw/doc", reader.token()), [](auto&) {}), dblock::LockLost);

  auto permit = a->acquire("pool", 5s, dblock::LockOptions{.permits = 2});
  dblock::FenceTarget permit_target(permit);
  store_->fenced(permit, [&](dblock::FencedTransaction& tx) { tx.execute(insert("pool", permit.token(), "permit")); });
  EXPECT_EQ(rows_noted("permit"), 1);

  permit.release();
  dblock::FenceTarget reader_target(reader);
  reader.release();
  EXPECT_THROW(store_->fenced(permit_target, [&](auto& tx) { tx.execute(insert("pool", 0, "gone")); }),
               dblock::LockLost);
  // The group still holds the name through the other reader, but this membership ended.
  EXPECT_THROW(store_->fenced(reader_target, [&](auto& tx) { tx.execute(insert("rw/doc", 0, "gone")); }),
               dblock::LockLost);
  EXPECT_EQ(rows_noted("gone"), 0);
  store_->fenced(other_reader, [&](auto& tx) { tx.execute(insert("rw/doc", other_reader.token(), "other")); });
  EXPECT_EQ(rows_noted("other"), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, FenceGroups,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable, dblock::test::kSqlite,
                                                                  dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

// PostgreSQL and MySQL/MariaDB: members' fences take share locks, so readers do not exclude each
// other, and a reader paused inside its fenced transaction keeps the writer out, past its lease.
class ReaderFence : public FenceGroups {};

TEST_P(ReaderFence, AReadersFenceDoesNotBlockAnotherReadersFence) {
  auto a = manager();
  auto b = manager();
  auto first = a->acquire("rw/shared", 5s, kShared);
  auto second = b->acquire("rw/shared", 5s, kShared);
  auto other_store = dblock::Store::open(installation_->dsn());
  std::promise<void> first_fenced;
  std::promise<void> second_done;
  auto second_done_future = second_done.get_future();
  auto first_run = std::async(std::launch::async, [&] {
    store_->fenced(first, [&](dblock::FencedTransaction& tx) {
      tx.execute(insert("rw/shared", first.token(), "first"));
      first_fenced.set_value();
      // Held open until the second reader's fenced transaction committed (or the wait runs out).
      (void)second_done_future.wait_for(10s);
    });
  });
  auto fenced = first_fenced.get_future();
  // Until the first reader's transaction is fenced and open, or its fence failed.
  for (auto until = Steady::now() + 10s; fenced.wait_for(5ms) != std::future_status::ready;) {
    if (first_run.wait_for(0s) == std::future_status::ready) first_run.get();  // rethrows the fence's failure
    ASSERT_LT(Steady::now(), until) << "the first reader's fenced transaction did not begin";
  }
  auto started = Steady::now();
  other_store->fenced(
      second, [&](dblock::FencedTransaction& tx) { tx.execute(insert("rw/shared", second.token(), "second")); });
  auto took = Steady::now() - started;
  second_done.set_value();
  first_run.get();
  EXPECT_LT(took, 3s) << "the second reader's fence waited for the first reader's transaction";
  EXPECT_EQ(rows_noted("first"), 1);
  EXPECT_EQ(rows_noted("second"), 1);
}

TEST_P(ReaderFence, NoWriterIsGrantedWhileAReadersFencedTransactionIsOpenEvenPastItsLease) {
  auto token = paused_reader("rw/paused", "paused-reader", 600ms);
  auto app = app_connection();
  app->exec(dialect_ == "mysql" ? "START TRANSACTION" : "BEGIN");
  fence_member(*app, "rw/paused", "paused-reader", token);
  // The share locks alone: the server's timeouts switched off inside the transaction.
  if (dialect_ == "postgresql")
    app->exec("SET LOCAL idle_in_transaction_session_timeout = 0; SET LOCAL statement_timeout = 0");
  else
    app->exec("SET SESSION idle_transaction_timeout = 0");
  app->exec(insert("rw/paused", token, "reader"));
  auto fenced_at = Steady::now();

  auto writer_store = dblock::Store::open(installation_->dsn());
  dblock::LockManager writer(writer_store, in_mode());
  auto granted = std::async(std::launch::async, [&] {
    auto next = writer.acquire("rw/paused", 20s);
    return std::pair{next.token(), Steady::now()};
  });
  EXPECT_EQ(granted.wait_for(2500ms), std::future_status::timeout)
      << "a writer took the name over a reader's fenced transaction";
  EXPECT_GT(Steady::now() - fenced_at, 2s);
  // The server lets the share locks go before its reply to COMMIT reaches this thread, so the
  // writer may be granted before exec() returns: the bound is the moment COMMIT was sent.
  auto commit_sent_at = Steady::now();
  app->exec("COMMIT");
  auto [next_token, granted_at] = granted.get();
  EXPECT_GT(next_token, token);
  EXPECT_GE(granted_at, commit_sent_at);
  EXPECT_EQ(rows_noted("reader"), 1);

  // Its lease over and the writer holding the name, the reader's fence is refused.
  app->exec(dialect_ == "mysql" ? "START TRANSACTION" : "BEGIN");
  EXPECT_THROW(fence_member(*app, "rw/paused", "paused-reader", token), std::runtime_error);
  app->exec("ROLLBACK");
}

INSTANTIATE_TEST_SUITE_P(Backends, ReaderFence,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
