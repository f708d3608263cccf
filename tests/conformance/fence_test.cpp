// The fence (migration 0009; Store::fenced, doc/semantics.md "Fence"), on every table-mode backend:
// a transaction fenced by a grant commits only while that grant is the name's live holder, the
// name cannot be taken over while such a transaction is open, and (PostgreSQL, MySQL/MariaDB) the
// server ends a fenced transaction paused past its lease, so the next holder is granted within the
// TTL plus a bound and the paused writer's write never lands.

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

namespace {

class Fence : public dblock::test::InstalledCaseTest {
 protected:
  void SetUp() override {
    InstalledCaseTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;  // no server: the base skipped or failed already
    auto& prefix = installation_->prefix();
    dialect_ = GetParam().dialect;
    if (dialect_ == "postgresql") {
      data_ = fmt::format("\"{}fence_data\"", prefix);
      fence_call_ = fmt::format("SELECT \"public\".\"{}fence\"", prefix);
      installation_->admin().exec(fmt::format("CREATE TABLE {} (name text, token bigint, note text)", data_));
    } else if (dialect_ == "mysql") {
      data_ = fmt::format("`{}fence_data`", prefix);
      fence_call_ = fmt::format("SELECT `{}fence`", prefix);
      installation_->admin().exec(
          fmt::format("CREATE TABLE {} (name VARCHAR(255), token BIGINT, note VARCHAR(64)) ENGINE = InnoDB", data_));
    } else {
      data_ = fmt::format("\"{}fence_data\"", prefix);
      fence_call_ = fmt::format("INSERT INTO \"{}fence\" (name, token) VALUES", prefix);
      installation_->admin().exec(fmt::format("CREATE TABLE {} (name TEXT, token INTEGER, note TEXT)", data_));
    }
  }
  void TearDown() override {
    if (installation_) installation_->admin().exec(fmt::format("DROP TABLE {}", data_));
  }

  /// A connection of the application's own (the test's second admin), no dblock code on it.
  [[nodiscard]] std::unique_ptr<dblock::test::Admin> app_connection() const {
    return dblock::test::make_admin(GetParam().dialect, dblock::test::admin_dsn(GetParam(), server_dsn_),
                                    dblock::test::default_schema(GetParam()), installation_->prefix());
  }
  [[nodiscard]] std::string begin() const {
    return dialect_ == "mysql" ? "START TRANSACTION" : dialect_ == "sqlite" ? "BEGIN IMMEDIATE" : "BEGIN";
  }
  /// The documented fence statement for (name, token) (doc/sql-contract.md).
  void fence(dblock::test::Admin& app, const std::string& name, std::int64_t token) const {
    if (std::getenv("DBLOCK_TEST_FENCE_OFF") != nullptr) return;  // only to see the tests fail without the fence
    auto call = fmt::format("{}('{}', {})", fence_call_, name, token);
    if (dialect_ == "sqlite")
      app.exec(call);
    else
      (void)app.query(call);
  }
  [[nodiscard]] std::string insert(const std::string& name, std::int64_t token, const std::string& note) const {
    return fmt::format("INSERT INTO {} (name, token, note) VALUES ('{}', {}, '{}')", data_, name, token, note);
  }
  /// A grant taken through the SQL contract's acquire function and never renewed (a holder that
  /// paused right after its grant), on PostgreSQL and MySQL/MariaDB; SQLite: a manager's lock, whose
  /// renewals wait behind the fenced transaction's write lock.
  std::int64_t paused_grant(const std::string& name, std::chrono::milliseconds ttl) {
    auto& admin = installation_->admin();
    if (dialect_ == "postgresql")
      return std::stoll(
          admin
              .query(fmt::format("SELECT lock_token FROM \"public\".\"{}acquire_held\"('{}', 'paused-holder', {}, 0)",
                                 installation_->prefix(), name, ttl.count()))
              .at(0));
    if (dialect_ == "mysql") {
      auto reply = admin
                       .query(fmt::format("SELECT `{}acquire_held`('{}', 'paused-holder', {}, 0)",
                                          installation_->prefix(), name, ttl.count() * 1000))
                       .at(0);
      return std::stoll(reply.substr(reply.find(' ') + 1));
    }
    sqlite_holder_ = manager(dblock::ManagerOptions{.default_ttl = ttl});
    sqlite_lock_.emplace(sqlite_holder_->acquire(name, 5s));
    return sqlite_lock_->token();
  }
  [[nodiscard]] std::string param(int n) const { return dialect_ == "postgresql" ? fmt::format("${}", n) : "?"; }
  [[nodiscard]] std::int64_t rows_with(std::int64_t token) const {
    return std::stoll(
        installation_->admin().query(fmt::format("SELECT count(*) FROM {} WHERE token = {}", data_, token)).at(0));
  }

  std::unique_ptr<dblock::LockManager> sqlite_holder_;
  std::optional<dblock::Lock> sqlite_lock_;
  std::string dialect_;
  std::string data_;
  std::string fence_call_;
};

TEST_P(Fence, TheHoldersFencedWriteCommitsAStaleOrRevokedGrantsIsRefusedWithNothingCommitted) {
  auto holder = manager();
  auto lock = holder->acquire("fence/api", 5s);
  store_->fenced(lock, [&](dblock::FencedTransaction& tx) {
    EXPECT_EQ(
        tx.execute(fmt::format("INSERT INTO {} (name, token, note) VALUES ({}, {}, 'ok')", data_, param(1), param(2)),
                   {lock.name(), std::to_string(lock.token())}),
        1);
    if (dialect_ != "sqlite") {
      EXPECT_GT(tx.lease_left().value_or(0ms), 0ms);
    }
  });
  EXPECT_EQ(rows_with(lock.token()), 1);

  auto stale = lock.token() + 1000;
  EXPECT_THROW(store_->fenced(dblock::FenceTarget("fence/api", stale),
                              [&](dblock::FencedTransaction& tx) { tx.execute(insert("fence/api", stale, "stale")); }),
               dblock::LockLost);
  EXPECT_EQ(rows_with(stale), 0);

  // The raw SQL refuses too, with the documented error, and the transaction cannot commit.
  auto app = app_connection();
  app->exec(begin());
  try {
    fence(*app, "fence/api", stale);
    ADD_FAILURE() << "the fence accepted a token that never held the name";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("dblock fence"), std::string::npos) << e.what();
  }
  app->exec("ROLLBACK");

  ASSERT_TRUE(store_->revoke("fence/api"));
  EXPECT_THROW(
      store_->fenced(lock,
                     [&](dblock::FencedTransaction& tx) { tx.execute(insert("fence/api", lock.token(), "revoked")); }),
      dblock::LockLost);
  EXPECT_EQ(rows_with(lock.token()), 1);
}

// A deadlock makes MySQL end the whole transaction (a full disk, SQLite): what the work then runs
// would commit statement by statement, outside the fence. So after any failed statement, as on
// PostgreSQL, nothing more runs in a fenced transaction and it commits nothing.
TEST_P(Fence, AfterAFailedStatementAFencedTransactionRunsNothingMoreAndCommitsNothing) {
  auto holder = manager();
  auto lock = holder->acquire("fence/failed", 5s);
  bool later_write_refused = false;
  EXPECT_THROW(store_->fenced(lock,
                              [&](dblock::FencedTransaction& tx) {
                                tx.execute(insert("fence/failed", lock.token(), "before"));
                                EXPECT_THROW(tx.execute("INSERT INTO dblock_test_no_such_table VALUES (1)"),
                                             dblock::Error);
                                try {  // the work goes on, as if the failure were one it could handle
                                  tx.execute(insert("fence/failed", lock.token(), "after"));
                                } catch (const dblock::Error&) {
                                  later_write_refused = true;
                                }
                              }),
               dblock::DatabaseError);
  EXPECT_TRUE(later_write_refused);
  EXPECT_EQ(rows_with(lock.token()), 0) << "a fenced transaction committed writes after one of its statements failed";
}

// The share lock alone (the server's timeouts switched off inside the transaction): the lease ends
// while the fenced transaction is open, and no contender is granted before it commits.
TEST_P(Fence, NoTakeoverCommitsWhileAFencedTransactionIsOpenEvenPastTheLease) {
  auto token = paused_grant("fence/open", 600ms);
  auto app = app_connection();
  app->exec(begin());
  fence(*app, "fence/open", token);
  if (dialect_ == "postgresql")
    app->exec("SET LOCAL idle_in_transaction_session_timeout = 0; SET LOCAL statement_timeout = 0");
  if (dialect_ == "mysql") app->exec("SET SESSION idle_transaction_timeout = 0");
  app->exec(insert("fence/open", token, "fenced"));
  auto fenced_at = Steady::now();

  auto contender_store = dblock::Store::open(installation_->dsn());
  dblock::LockManager contender(contender_store, in_mode());
  auto granted = std::async(std::launch::async, [&] {
    auto next = contender.acquire("fence/open", 20s);
    return std::pair{next.token(), Steady::now()};
  });
  // Well past the 600 ms lease, nobody was granted.
  EXPECT_EQ(granted.wait_for(2500ms), std::future_status::timeout)
      << "a contender took the name over a fenced transaction";
  EXPECT_GT(Steady::now() - fenced_at, 2s);
  // The server lets the share lock go before its reply to COMMIT reaches this thread, so the
  // contender may be granted before exec() returns: the bound is the moment COMMIT was sent.
  auto commit_sent_at = Steady::now();
  app->exec("COMMIT");
  auto [next_token, granted_at] = granted.get();
  EXPECT_GT(next_token, token);
  EXPECT_GE(granted_at, commit_sent_at);
  EXPECT_EQ(rows_with(token), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, Fence,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable, dblock::test::kSqlite,
                                                                  dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

// Where the fence meets the rest of the manager (PostgreSQL, MySQL/MariaDB, Galera; SQLite's one
// writer waits for a fence's write lock by design): nothing waits on a fenced row but that row's
// own next owner.
class FenceBesideOthers : public Fence {
 protected:
  /// A manager that renews every 100 ms, counting each renewal round's leases and every loss.
  std::unique_ptr<dblock::LockManager> counting_manager() {
    return manager(dblock::ManagerOptions{
        .default_ttl = 6s,
        .renew_interval = 100ms,
        .on_lost = [this](std::string_view, std::int64_t) { ++lost_; },
        .on_event =
            [this](const dblock::LockEvent& event) {
              if (event.kind != dblock::LockEventKind::renewed) return;
              std::lock_guard lock(mutex_);
              renewals_.push_back(event.count);
            },
    });
  }
  /// Whether a renewal round after the `since`-th extended at least `leases` leases.
  bool renewed_since(std::size_t since, std::int64_t leases) {
    std::lock_guard lock(mutex_);
    for (auto i = since; i < renewals_.size(); ++i)
      if (renewals_[i] >= leases) return true;
    return false;
  }
  std::size_t renewal_rounds() {
    std::lock_guard lock(mutex_);
    return renewals_.size();
  }
  /// The manager's own fence on the lock taken with `fenced_options`, beside a plain lock of the
  /// same manager: the plain lock is renewed while the fenced transaction is open, and both once it
  /// has committed; nothing is lost.
  void renewals_go_on_beside_the_managers_own_fence(const dblock::LockOptions& fenced_options) {
    auto holder = counting_manager();
    auto fenced = holder->acquire("meet/fenced", 5s, fenced_options);
    auto other = holder->acquire("meet/other", 5s);
    bool renewed_during_fence = false;
    store_->fenced(fenced, [&](dblock::FencedTransaction& tx) {
      tx.execute(insert("meet/fenced", fenced.token(), "fenced"));
      auto since = renewal_rounds();
      // Up to the fence's own bound, less a second: the other lease (6 s, renewed every 100 ms)
      // would be lost by then anyway, however slow the machine.
      auto bound = tx.lease_left().value_or(6s) - 1s;
      renewed_during_fence = dblock::test::eventually([&] { return renewed_since(since, 1); }, bound);
    });
    EXPECT_TRUE(renewed_during_fence) << "no lease of the manager was renewed while its own fence held one row";
    auto after = renewal_rounds();
    EXPECT_TRUE(dblock::test::eventually([&] { return renewed_since(after, 2); }, 10s))
        << "the fenced lock was not renewed with the other once its fence had ended";
    EXPECT_FALSE(fenced.lost());
    EXPECT_FALSE(other.lost());
    EXPECT_EQ(lost_.load(), 0) << "a lease was lost on a healthy database";
    EXPECT_EQ(rows_with(fenced.token()), 1);
  }

  std::atomic<int> lost_{0};
  std::mutex mutex_;
  std::vector<std::int64_t> renewals_;
};

// Another process's fenced transaction on one name (12 s and more, well inside its lease): a try
// of that name answers busy at once, a waiter for it waits as a waiter, and the manager's other
// names, alone or combined with the fenced one, are granted meanwhile.
TEST_P(FenceBesideOthers, ATryOfAFencedNameIsBusyAtOnceAndTheManagersOtherNamesGoOn) {
  auto holder = manager(dblock::ManagerOptions{.default_ttl = 60s});
  auto held = holder->acquire("meet/acct", 5s);
  auto app = app_connection();
  app->exec(begin());
  fence(*app, "meet/acct", held.token());

  auto contender = manager();  // combining on, the default
  auto waiter = std::async(std::launch::async, [&] { return contender->acquire("meet/acct", 60s).token(); });
  EXPECT_FALSE(contender->try_acquire("meet/acct")) << "a try of a fenced name was granted";
  // Several at once: the combiner batches them with the fenced name.
  std::vector<std::string> names{"meet/acct", "meet/free-1", "meet/free-2", "meet/free-3", "meet/free-4"};
  for (int round = 0; round < 3; ++round) {
    std::vector<std::future<bool>> tries;
    for (auto& name : names)
      tries.push_back(std::async(std::launch::async, [&contender, name] {
        auto lock = contender->try_acquire(name);
        return lock.has_value();
      }));
    for (std::size_t i = 0; i < names.size(); ++i)
      EXPECT_EQ(tries[i].get(), i != 0) << names[i] << (i == 0 ? " was granted while fenced" : " was refused");
  }
  EXPECT_EQ(waiter.wait_for(0s), std::future_status::timeout) << "the waiter was granted while the fence held the name";
  // The fenced transaction was never in anyone's way: it is still open, and commits.
  EXPECT_NO_THROW(app->exec("COMMIT")) << "the fence had been ended while the tries waited for it";
  auto token = held.token();
  held.release();
  ASSERT_EQ(waiter.wait_for(30s), std::future_status::ready);
  EXPECT_GT(waiter.get(), token);
}

TEST_P(FenceBesideOthers, TheManagersOwnFenceNeverStopsItsOtherRenewals) {
  renewals_go_on_beside_the_managers_own_fence({});
}

TEST_P(FenceBesideOthers, AMembersOwnFenceNeverStopsTheManagersOtherRenewals) {
  renewals_go_on_beside_the_managers_own_fence(dblock::LockOptions{.permits = 2});
}

INSTANTIATE_TEST_SUITE_P(Backends, FenceBesideOthers,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

// PostgreSQL and MySQL/MariaDB: the server ends a fenced transaction paused past its lease.
class PausedFence : public Fence {};

TEST_P(PausedFence, TheServerEndsAPausedFencedTransactionTheNextHolderIsGrantedInTimeAndTheStaleWriteNeverLands) {
  constexpr auto kTtl = 1000ms;
  auto token = paused_grant("fence/paused", kTtl);
  auto app = app_connection();
  app->exec(begin());
  fence(*app, "fence/paused", token);
  // "In time" is the server's promise, read from the server, not a wall-clock guess: the fence bounds
  // the idle transaction by the lease left (MariaDB counts whole seconds, rounded up).
  if (dialect_ == "mysql") {
    auto seconds = std::stoll(app->query("SELECT @@session.idle_transaction_timeout").at(0));
    EXPECT_GE(seconds, 1);
    EXPECT_LE(seconds, 1) << "the fence let the paused transaction outlive the lease's whole second";
  } else {
    auto ms = std::stoll(
        app->query("SELECT setting FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").at(0));
    EXPECT_GT(ms, 0);
    EXPECT_LE(ms, kTtl.count()) << "the fence let the paused transaction outlive the lease";
  }
  app->exec(insert("fence/paused", token, "paused"));
  // The writer pauses here (a GC pause, SIGSTOP): it sends nothing until the contender was granted,
  // so a grant at all means the server ended the transaction (it holds the row locked till then).
  auto contender_store = dblock::Store::open(installation_->dsn());
  dblock::LockManager contender(contender_store, in_mode());
  auto next = contender.acquire("fence/paused", 20s);
  EXPECT_GT(next.token(), token);
  contender_store->fenced(
      next, [&](dblock::FencedTransaction& tx) { tx.execute(insert("fence/paused", next.token(), "next")); });
  // The paused writer resumes: its commit fails, and its write is absent.
  bool committed = true;
  try {
    app->exec("COMMIT");
  } catch (const std::runtime_error&) {
    committed = false;
  }
  EXPECT_FALSE(committed) << "the paused writer's commit succeeded after the next holder's";
  EXPECT_EQ(rows_with(token), 0);
  EXPECT_EQ(rows_with(next.token()), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, PausedFence,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
