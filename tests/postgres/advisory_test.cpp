// Advisory mode against a real PostgreSQL: interop with plain libpq sessions holding the same
// keys, shared/exclusive compatibility, one pinned session per owner, the server's own blocking
// wait, transaction-scoped locks on the application's connection, and refusals.

#include <libpq-fe.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using dblock::test::eventually;

namespace {

/// A plain libpq session: what `psql` or another language's client would be.
class RawSession {
 public:
  explicit RawSession(const std::string& dsn) : conn_(PQconnectdb(dsn.c_str())) {
    if (PQstatus(conn_) != CONNECTION_OK) throw std::runtime_error(PQerrorMessage(conn_));
  }
  ~RawSession() { PQfinish(conn_); }
  RawSession(const RawSession&) = delete;
  RawSession& operator=(const RawSession&) = delete;

  /// The first column of the first row, "" when there is none.
  std::string value(const std::string& sql) {
    PGresult* result = PQexec(conn_, sql.c_str());
    auto status = PQresultStatus(result);
    std::string out = status == PGRES_TUPLES_OK && PQntuples(result) > 0 ? PQgetvalue(result, 0, 0) : "";
    std::string error = PQresultErrorMessage(result);
    PQclear(result);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) throw std::runtime_error(sql + ": " + error);
    return out;
  }
  [[nodiscard]] PGconn* get() const noexcept { return conn_; }

 private:
  PGconn* conn_;
};

class Advisory : public ::testing::Test {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_DSN(server_dsn_, "DBLOCK_TEST_PG_DSN");
    installation_ = std::make_unique<dblock::test::Installation>("postgresql", server_dsn_);
    prefix_ = installation_->prefix();
    store_ = installation_->store();
    raw_ = std::make_unique<RawSession>(server_dsn_);
    // Keys are database-wide: each test process uses keys of its own.
    base_ = static_cast<std::int64_t>(getpid()) * 1000;
  }

  std::unique_ptr<dblock::LockManager> manager(dblock::ManagerOptions options = {}) {
    options.mode = dblock::LockMode::advisory;
    return std::make_unique<dblock::LockManager>(store_, std::move(options));
  }

  /// Server processes holding the bigint advisory key `key`.
  int holders(std::int64_t key) {
    auto k = static_cast<std::uint64_t>(key);
    return std::stoi(raw_->value(fmt::format(
        "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = {} AND objid = {} AND "
        "objsubid = 1 AND granted",
        k >> 32, k & 0xffffffffu)));
  }

  std::string server_dsn_;
  std::unique_ptr<dblock::test::Installation> installation_;
  std::string prefix_;
  std::shared_ptr<dblock::Store> store_;
  std::unique_ptr<RawSession> raw_;
  std::int64_t base_ = 0;
};

TEST_F(Advisory, ExcludesAndIsExcludedByPlainPgAdvisoryLockInBothDirections) {
  auto locks = manager();
  auto key = dblock::AdvisoryKey::of(base_ + 1);
  raw_->value(fmt::format("SELECT pg_advisory_lock({})", key.key()));
  EXPECT_FALSE(locks->try_acquire(key)) << "psql holds it";
  raw_->value(fmt::format("SELECT pg_advisory_unlock({})", key.key()));
  auto held = locks->try_acquire(key);
  ASSERT_TRUE(held);
  EXPECT_EQ(held->name(), key.to_string());
  EXPECT_EQ(raw_->value(fmt::format("SELECT pg_try_advisory_lock({})", key.key())), "f") << "dblock holds it";
  held->release();
  EXPECT_EQ(raw_->value(fmt::format("SELECT pg_try_advisory_lock({})", key.key())), "t");
  raw_->value("SELECT pg_advisory_unlock_all()");

  // A name's key is the documented hash (its values are pinned in the unit tests): another client
  // computes it and meets the same lock.
  auto name = fmt::format("orders/{}", getpid());
  auto named = locks->try_acquire(name);
  ASSERT_TRUE(named);
  EXPECT_EQ(raw_->value(fmt::format("SELECT pg_try_advisory_lock({})", dblock::AdvisoryKey::from_name(name).key())),
            "f");
  named->release();

  // The two-integer form is its own key space, as in PostgreSQL.
  auto pair = dblock::AdvisoryKey::of(static_cast<std::int32_t>(getpid()), 42);
  raw_->value(fmt::format("SELECT pg_advisory_lock({}, 42)", getpid()));
  EXPECT_FALSE(locks->try_acquire(pair));
  EXPECT_TRUE(locks->try_acquire(dblock::AdvisoryKey::of(std::int64_t{42} + base_))) << "bigint space unaffected";
  raw_->value("SELECT pg_advisory_unlock_all()");
  EXPECT_TRUE(locks->try_acquire(pair));
}

TEST_F(Advisory, SharedLocksCoexistAndExcludeExclusiveOnes) {
  auto a = manager();
  auto b = manager();
  auto c = manager();
  auto key = dblock::AdvisoryKey::of(base_ + 2);
  auto reader_a = a->try_acquire(key, {.shared = true});
  auto reader_b = b->try_acquire(key, {.shared = true});
  ASSERT_TRUE(reader_a && reader_b) << "shared with shared";
  EXPECT_GT(reader_b->token(), reader_a->token());
  EXPECT_FALSE(c->try_acquire(key)) << "exclusive against shared";
  EXPECT_EQ(raw_->value(fmt::format("SELECT pg_try_advisory_lock_shared({})", key.key())), "t");
  EXPECT_EQ(raw_->value(fmt::format("SELECT pg_try_advisory_lock({})", key.key())), "f");
  raw_->value("SELECT pg_advisory_unlock_all()");
  reader_a->release();
  EXPECT_FALSE(c->try_acquire(key)) << "one shared holder is enough to exclude";
  reader_b->release();
  auto writer = c->try_acquire(key);
  ASSERT_TRUE(writer);
  EXPECT_FALSE(a->try_acquire(key, {.shared = true})) << "shared against exclusive";
  EXPECT_EQ(raw_->value(fmt::format("SELECT pg_try_advisory_lock_shared({})", key.key())), "f");
}

TEST_F(Advisory, AnOwnerHoldsAllItsLocksOnOnePinnedSession) {
  auto a = manager();
  auto first = a->try_acquire(dblock::AdvisoryKey::of(base_ + 3));
  auto second = a->try_acquire(dblock::AdvisoryKey::of(base_ + 4));
  auto again = a->try_acquire(dblock::AdvisoryKey::of(base_ + 3));
  ASSERT_TRUE(first && second && again);
  EXPECT_EQ(again->count(), 2);
  auto pids = [&](std::int64_t from, std::int64_t to) {
    return raw_->value(
        fmt::format("SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid "
                    "= 1 AND classid = 0 AND objid BETWEEN {} AND {} AND granted",
                    from, to));
  };
  EXPECT_EQ(pids(base_ + 3, base_ + 4), "1") << "one session, not one per lock";
  std::optional<dblock::Lock> other_thread;
  std::thread([&] { other_thread = a->try_acquire(dblock::AdvisoryKey::of(base_ + 5)); }).join();
  ASSERT_TRUE(other_thread);
  EXPECT_EQ(pids(base_ + 3, base_ + 5), "2") << "another thread is another owner with its own session";
  again->release();
  EXPECT_EQ(holders(base_ + 3), 1) << "the server is asked once per lock; re-entry is counted locally";
  first->release();
  EXPECT_EQ(holders(base_ + 3), 0);
}

TEST_F(Advisory, AnOwnersSessionLingersBetweenLocksAndGoesBackWhenThePoolRunsDry) {
  auto pid_holding = [&](std::int64_t key) {
    return raw_->value(
        fmt::format("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND "
                    "classid = 0 AND objid = {} AND granted",
                    key));
  };
  auto a = manager();
  std::string first_pid;
  {
    auto first = a->try_acquire(dblock::AdvisoryKey::of(base_ + 6));
    ASSERT_TRUE(first);
    first_pid = pid_holding(base_ + 6);
  }
  // Released: the session stays with its owner, so another owner meanwhile gets another one
  // (a plain LIFO pool would have handed it the same), and the first owner comes back to its own.
  std::string other_pid;
  std::thread([&] {
    auto other = a->try_acquire(dblock::AdvisoryKey::of(base_ + 7));
    ASSERT_TRUE(other);
    other_pid = pid_holding(base_ + 7);
  }).join();
  auto again = a->try_acquire(dblock::AdvisoryKey::of(base_ + 8));
  ASSERT_TRUE(again);
  EXPECT_NE(other_pid, first_pid);
  EXPECT_EQ(pid_holding(base_ + 8), first_pid) << "the owner's next lock is on the same server process";
  again->release();

  // One pooled session, kept by an idle owner: another owner, and a table-mode manager on the same
  // store, get it back at once instead of waiting out the pool's timeout.
  auto small = dblock::Store::open(installation_->dsn("pool=1"));
  auto b = std::make_unique<dblock::LockManager>(small, dblock::ManagerOptions{.mode = dblock::LockMode::advisory});
  ASSERT_TRUE(b->try_acquire(dblock::AdvisoryKey::of(base_ + 9)));
  std::optional<dblock::Lock> from_another_owner;
  std::string error;
  std::thread([&] {
    try {
      from_another_owner = b->try_acquire(dblock::AdvisoryKey::of(base_ + 9));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }).join();
  EXPECT_TRUE(from_another_owner) << error;
  from_another_owner.reset();
  dblock::LockManager table(small);
  EXPECT_TRUE(table.try_acquire(fmt::format("table/{}", base_)));
}

TEST_F(Advisory, WaitingIsTheServersOwnBlockingWaitNotPolling) {
  auto waiter = manager();
  auto key = dblock::AdvisoryKey::of(base_ + 6);
  raw_->value(fmt::format("SELECT pg_advisory_lock({})", key.key()));
  auto result = std::async(std::launch::async, [&] { return waiter->acquire(key, 20s).token(); });
  // The waiter's backend sleeps in the server's lock manager, on this key (a bigint key is classid
  // and objid, objsubid 1): not any other test's waiter on the same server.
  ASSERT_TRUE(eventually([&] {
    return raw_->value(fmt::format("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                                   "AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = {}",
                                   key.key())) != "0";
  }));
  auto released_at = std::chrono::steady_clock::now();
  raw_->value(fmt::format("SELECT pg_advisory_unlock({})", key.key()));
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_GT(result.get(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - released_at, 2s) << "granted by the server at the release";
  EXPECT_EQ(waiter->stats().contended, 1u) << "one try, then one wait: no polling loop";
}

/// What a VACUUM (VERBOSE) of one table reported: row versions removed, and dead ones it had to keep.
struct VacuumReport {
  long long removed = 0;
  long long kept_dead = -1;
};

VacuumReport vacuum_verbose(PGconn* conn, const std::string& table) {
  std::string notices;
  auto previous = PQsetNoticeProcessor(
      conn, [](void* out, const char* text) { *static_cast<std::string*>(out) += text; }, &notices);
  PGresult* result = PQexec(conn, ("VACUUM (VERBOSE) " + table).c_str());
  auto status = PQresultStatus(result);
  std::string error = PQresultErrorMessage(result);
  PQclear(result);
  PQsetNoticeProcessor(conn, previous, nullptr);
  if (status != PGRES_COMMAND_OK) throw std::runtime_error("VACUUM: " + error);
  VacuumReport report;
  auto at = notices.find("tuples: ");  // "tuples: R removed, N remain, K are dead but not yet removable"
  long long remain = 0;
  if (at == std::string::npos || std::sscanf(notices.c_str() + at, "tuples: %lld removed, %lld remain, %lld are dead",
                                             &report.removed, &remain, &report.kept_dead) != 3)
    throw std::runtime_error("VACUUM VERBOSE said: " + notices);
  return report;
}

TEST_F(Advisory, AWaiterHoldsNoSnapshotThatKeepsVacuumFromRemovingRows) {
  // A database of its own: no other test's open transaction holds the horizon back here.
  auto database = fmt::format("dblock_vacuum_{}", getpid());
  auto drop = [&] {
    if (raw_->value("SELECT count(*) FROM pg_database WHERE datname = '" + database + "'") != "0")
      raw_->value("DROP DATABASE " + database + " WITH (FORCE)");
  };
  drop();  // left by a run of a process with the same pid that died
  raw_->value("CREATE DATABASE " + database);
  auto query = server_dsn_.find('?');
  auto path = server_dsn_.rfind('/', query);
  auto database_dsn =
      server_dsn_.substr(0, path + 1) + database + (query == std::string::npos ? "" : server_dsn_.substr(query));
  constexpr int kRows = 4000;
  auto run = [&] {  // ASSERTs return from here: the database is dropped below in any case
    auto store = dblock::Store::open(installation_->dsn_on(database_dsn));
    dblock::migrate(*store);
    RawSession app(database_dsn);
    app.value(
        fmt::format("CREATE TABLE app_rows WITH (autovacuum_enabled = off) AS "
                    "SELECT generate_series(1, {}) AS id",
                    kRows));
    dblock::LockManager holder(store, {.mode = dblock::LockMode::advisory});
    dblock::LockManager waiter(store, {.mode = dblock::LockMode::advisory});
    auto key = dblock::AdvisoryKey::of(base_ + 11);
    auto held = holder.try_acquire(key);
    ASSERT_TRUE(held);
    auto waited = std::async(std::launch::async, [&] { return waiter.acquire(key, 15s).token(); });
    struct ReleaseFirst {  // on any way out, before `waited` waits for the waiter
      std::optional<dblock::Lock>& held;
      ~ReleaseFirst() { held.reset(); }
    } release_first{held};
    RawSession observer(database_dsn);
    ASSERT_TRUE(eventually([&] {
      return observer.value(
                 "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = "
                 "'advisory' AND datname = current_database()") != "0";
    }));
    app.value("DELETE FROM app_rows");  // committed while the waiter waits
    // Each slice of the wait takes a fresh snapshot (and between slices the session holds none):
    // within about one slice VACUUM may remove every deleted row. One long wait kept them all.
    VacuumReport report;
    long long removed = 0;
    auto removable = eventually(
        [&] {
          report = vacuum_verbose(observer.get(), "app_rows");
          removed += report.removed;
          return removed == kRows;
        },
        3s);
    EXPECT_TRUE(removable) << "VACUUM removed " << removed << " of " << kRows << " deleted rows in 3 s; "
                           << report.kept_dead
                           << " dead but not removable at the last run (the waiter's backend_xmin: '"
                           << observer.value(
                                  "SELECT backend_xmin FROM pg_stat_activity WHERE wait_event = 'advisory' "
                                  "AND datname = current_database()")
                           << "')";
    EXPECT_EQ(waited.wait_for(0s), std::future_status::timeout) << "the waiter still waits";
    held->release();
    ASSERT_EQ(waited.wait_for(5s), std::future_status::ready);
    EXPECT_GT(waited.get(), 0) << "granted at the release";
  };
  try {
    run();
  } catch (...) {
    drop();
    throw;
  }
  drop();
}

TEST_F(Advisory, TimeoutLeavesTheSessionUsableAndNothingHeld) {
  auto waiter = manager();
  auto key = dblock::AdvisoryKey::of(base_ + 7);
  raw_->value(fmt::format("SELECT pg_advisory_lock({})", key.key()));
  auto started = std::chrono::steady_clock::now();
  EXPECT_THROW((void)waiter->acquire(key, 300ms), dblock::Timeout);
  auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 5s);
  EXPECT_EQ(holders(key.key()), 1) << "only psql holds it";
  raw_->value(fmt::format("SELECT pg_advisory_unlock({})", key.key()));
  auto held = waiter->acquire(key, 1s);
  EXPECT_EQ(holders(key.key()), 1);
  EXPECT_EQ(waiter->stats().timeouts, 1u);
}

TEST_F(Advisory, TransactionScopedLockOnTheApplicationsConnection) {
  auto locks = manager();
  RawSession app(server_dsn_);
  app.value("BEGIN");
  app.value("SET LOCAL lock_timeout = '7s'");
  auto invoice = fmt::format("invoice/{}", getpid());
  auto token = dblock::postgres::try_xact_lock(*store_, app.get(), dblock::AdvisoryKey::from_name(invoice));
  ASSERT_TRUE(token);
  EXPECT_FALSE(locks->try_acquire(invoice)) << "the same key as advisory mode's named lock";
  EXPECT_EQ(app.value("SHOW lock_timeout"), "7s");
  app.value("COMMIT");
  auto after = locks->try_acquire(invoice);
  ASSERT_TRUE(after) << "released by COMMIT";
  EXPECT_GT(after->token(), *token) << "one token sequence for every mode";

  // A wait that times out returns empty and leaves the transaction healthy and its settings alone.
  app.value("BEGIN");
  app.value("SET LOCAL lock_timeout = '7s'");
  auto started = std::chrono::steady_clock::now();
  auto refused =
      dblock::postgres::try_xact_lock(*store_, app.get(), dblock::AdvisoryKey::from_name(invoice), {.timeout = 300ms});
  EXPECT_FALSE(refused);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 300ms);
  EXPECT_EQ(PQtransactionStatus(app.get()), PQTRANS_INTRANS) << "not aborted";
  EXPECT_EQ(app.value("SHOW lock_timeout"), "7s");
  EXPECT_EQ(app.value("SELECT 1"), "1");
  // Shared transaction locks coexist with each other, and a waiting one is granted on release.
  auto shared_key = dblock::AdvisoryKey::of(base_ + 8);
  auto reader = locks->try_acquire(shared_key, {.shared = true});
  ASSERT_TRUE(reader);
  EXPECT_TRUE(dblock::postgres::try_xact_lock(*store_, app.get(), shared_key, {.shared = true}));
  EXPECT_FALSE(dblock::postgres::try_xact_lock(*store_, app.get(), dblock::AdvisoryKey::of(base_ + 8)))
      << "exclusive against shared (the app's own shared lock does not count against itself; dblock's does)";
  app.value("ROLLBACK");
  EXPECT_EQ(holders(base_ + 8), 1) << "ROLLBACK released the app's lock; dblock's reader remains";
}

TEST_F(Advisory, XactLockRefusesAConnectionWithoutAHealthyTransaction) {
  RawSession app(server_dsn_);
  auto key = dblock::AdvisoryKey::of(base_ + 9);
  EXPECT_THROW((void)dblock::postgres::try_xact_lock(*store_, nullptr, key), dblock::InvalidArgument);
  EXPECT_THROW((void)dblock::postgres::try_xact_lock(*store_, app.get(), key), dblock::InvalidArgument)
      << "no BEGIN: the lock would be released at once";
  app.value("BEGIN");
  EXPECT_THROW(app.value("SELECT 1/0"), std::runtime_error);
  EXPECT_THROW((void)dblock::postgres::try_xact_lock(*store_, app.get(), key), dblock::InvalidArgument)
      << "an aborted transaction";
  EXPECT_THROW((void)dblock::postgres::try_xact_lock(*store_, app.get(), key, {.timeout = -1ms}),
               dblock::InvalidArgument);
  app.value("ROLLBACK");
  EXPECT_EQ(holders(base_ + 9), 0);
}

TEST_F(Advisory, RefusesLoudlyThroughAPoolerInTransactionMode) {
  std::string pooler_dsn;
  DBLOCK_REQUIRE_DSN(pooler_dsn, "DBLOCK_TEST_PGBOUNCER_DSN");
  auto key = dblock::AdvisoryKey::of(base_ + 10);
  {
    // The first lock statement runs only on the server process the login reported, which through
    // a pooler is none: refused there, and up front from then on.
    auto through_pooler = dblock::Store::open(installation_->dsn_on(pooler_dsn, "pool=1"));
    dblock::LockManager locks(through_pooler, {.mode = dblock::LockMode::advisory});
    try {
      (void)locks.try_acquire(key);
      FAIL() << "granted through a transaction pooler";
    } catch (const dblock::ConnectionError& e) {
      EXPECT_NE(std::string(e.what()).find("pool_mode=transaction"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)locks.try_acquire(key), dblock::InvalidArgument);
    EXPECT_EQ(holders(key.key()), 0) << "nothing was taken";
  }
  // A URI that calls the pooler a session pool: the first statement runs unchecked, and the check
  // between statements must catch the pooler moving the session.
  auto through_pooler = dblock::Store::open(installation_->dsn_on(pooler_dsn, "pool=1&pool_mode=session"));
  dblock::LockManager locks(through_pooler, {.mode = dblock::LockMode::advisory});
  decltype(locks.try_acquire(key)) held;
  try {
    held = locks.try_acquire(key);
  } catch (const dblock::ConnectionError& e) {
    // The pooler moved the first statement between its prepare and its execution (the other
    // suites keep it busy): refused at the first statement, which is as it should be.
    EXPECT_NE(std::string(e.what()).find("pool_mode=transaction"), std::string::npos) << e.what();
    return;
  }
  ASSERT_TRUE(held);
  auto k = static_cast<std::uint64_t>(key.key());
  auto holder =
      raw_->value(fmt::format("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = {} AND "
                              "objid = {} AND objsubid = 1 AND granted",
                              k >> 32, k & 0xffffffffu));
  ASSERT_FALSE(holder.empty());
  // Other clients of the pooler take server processes in open transactions until one has the
  // holder: our next statement then runs on another server process, as under load.
  std::vector<std::unique_ptr<RawSession>> others;
  bool holder_taken = false;
  for (int i = 0; i < 8 && !holder_taken; ++i) {
    others.push_back(std::make_unique<RawSession>(pooler_dsn));
    others.back()->value("BEGIN");
    holder_taken = others.back()->value("SELECT pg_backend_pid()") == holder;
  }
  ASSERT_TRUE(holder_taken);
  try {
    held->release();
    FAIL() << "a release through a transaction pooler must not pass silently";
  } catch (const dblock::LockLost& e) {
    EXPECT_NE(std::string(e.what()).find("pool_mode=transaction"), std::string::npos) << e.what();
  }
  EXPECT_EQ(locks.stats().lost, 1u);
  for (auto& other : others) other->value("ROLLBACK");
  raw_->value("SELECT pg_terminate_backend(" + holder + ")");  // the stranded lock
}

TEST_F(Advisory, MisuseIsRefusedWithAClearError) {
  auto locks = manager();
  EXPECT_THROW((void)locks->try_acquire("x", {.ttl = 5s}), dblock::InvalidArgument) << "advisory locks have no lease";
  dblock::LockManager table(store_);
  EXPECT_THROW((void)table.try_acquire(dblock::AdvisoryKey::of(1)), dblock::InvalidArgument);
  EXPECT_THROW((void)locks->try_acquire("x", {.permits = 2}), dblock::InvalidArgument) << "semaphores need table mode";
  auto sqlite = dblock::Store::open("sqlite://" + dblock::test::embedded_sqlite_path());
  dblock::migrate(*sqlite);
  try {
    dblock::LockManager refused(sqlite, {.mode = dblock::LockMode::advisory});
    FAIL() << "SQLite has no advisory locks";
  } catch (const dblock::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("advisory"), std::string::npos) << e.what();
  }
  RawSession app(server_dsn_);
  app.value("BEGIN");
  EXPECT_THROW((void)dblock::postgres::try_xact_lock(*sqlite, app.get(), dblock::AdvisoryKey::of(1)),
               dblock::InvalidArgument);
  app.value("ROLLBACK");
  dblock::test::remove_embedded_sqlite();
}

}  // namespace
