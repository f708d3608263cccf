// MySQL/MariaDB properties the shared suites cannot express: GET_LOCK interop with a plain client
// session in both directions, the documented server-side names (prefix, hashing of long names),
// what GET_LOCK cannot do, the left-to-right ON DUPLICATE KEY UPDATE pitfall, and lock-wait
// timeouts retried and counted.

#include <algorithm>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/admin.hpp"
#include "support/eventually.hpp"
#include "support/every_statement_set.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"
#include "support/tcp_proxy.hpp"

using namespace std::chrono_literals;

namespace {

class MySql : public ::testing::Test {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_DSN(server_dsn_, "DBLOCK_TEST_MYSQL_DSN");
    installation_ = std::make_unique<dblock::test::Installation>("mysql", server_dsn_);
    prefix_ = installation_->prefix();
    store_ = installation_->store();
    admin_ = &installation_->admin();
    other_ = dblock::test::make_admin("mysql", server_dsn_, "dblock", prefix_);
  }

  std::unique_ptr<dblock::LockManager> manager(dblock::LockMode mode = dblock::LockMode::advisory) {
    return std::make_unique<dblock::LockManager>(store_, dblock::ManagerOptions{.mode = mode});
  }
  /// The documented GET_LOCK name of a lock name (doc/mysql.md: GET_LOCK mode), as a SQL literal.
  std::string full_name(const std::string& name) const { return fmt::format("'dblock.{}:{}'", prefix_, name); }

  std::string server_dsn_;
  std::string prefix_;
  std::shared_ptr<dblock::Store> store_;
  std::unique_ptr<dblock::test::Installation> installation_;
  dblock::test::Admin* admin_ = nullptr;  // also a plain client session holding GET_LOCK locks
  std::unique_ptr<dblock::test::Admin> other_;
};

TEST_F(MySql, PlainGetLockSessionAndDblockExcludeEachOtherBothWays) {
  auto locks = manager();
  ASSERT_EQ(admin_->query(fmt::format("SELECT GET_LOCK({}, 0)", full_name("orders/42"))).at(0), "1");
  EXPECT_FALSE(locks->try_acquire("orders/42")) << "a plain session's GET_LOCK excludes dblock";
  ASSERT_EQ(admin_->query(fmt::format("SELECT RELEASE_LOCK({})", full_name("orders/42"))).at(0), "1");
  auto held = locks->try_acquire("orders/42");
  ASSERT_TRUE(held);
  EXPECT_EQ(admin_->query(fmt::format("SELECT GET_LOCK({}, 0)", full_name("orders/42"))).at(0), "0")
      << "dblock's lock excludes a plain session";
  held->release();
  EXPECT_EQ(admin_->query(fmt::format("SELECT GET_LOCK({}, 0)", full_name("orders/42"))).at(0), "1");
}

TEST_F(MySql, ATransactionScopedLockIsRefusedForAMysqlStore) {
  // MySQL has advisory locks (GET_LOCK), which once let this PostgreSQL-only call through.
  try {
    (void)dblock::postgres::try_xact_lock(*store_, nullptr, dblock::AdvisoryKey::from_name("x"));
    ADD_FAILURE() << "try_xact_lock accepted a MySQL store";
  } catch (const dblock::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("PostgreSQL store"), std::string::npos) << e.what();
  }
  auto sqlite = dblock::Store::open("sqlite://" + dblock::test::embedded_sqlite_path());
  EXPECT_THROW((void)dblock::postgres::try_xact_lock(*sqlite, nullptr, dblock::AdvisoryKey::from_name("x")),
               dblock::InvalidArgument);
  dblock::test::remove_embedded_sqlite();
}

TEST_F(MySql, AWaiterIsGrantedByTheServerWhenAPlainSessionReleases) {
  auto locks = manager();
  ASSERT_EQ(admin_->query(fmt::format("SELECT GET_LOCK({}, 0)", full_name("handoff"))).at(0), "1");
  auto waiter = std::async(std::launch::async, [&] { return locks->acquire("handoff", 20s).token(); });
  ASSERT_TRUE(dblock::test::eventually([&] { return locks->stats().contended >= 1; }));
  // The waiter sits in GET_LOCK on the server (no polling): a session shows the user-lock wait.
  ASSERT_TRUE(dblock::test::eventually([&] {
    return other_->query("SELECT count(*) FROM information_schema.processlist WHERE state LIKE '%user lock%'").at(0) !=
           "0";
  }));
  admin_->query(fmt::format("SELECT RELEASE_LOCK({})", full_name("handoff")));
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  EXPECT_GT(waiter.get(), 0);
  EXPECT_EQ(locks->stats().contended, 1u) << "one try, then one server-side wait";
}

TEST_F(MySql, AGetLockWaiterHasNoTransactionSoPurgeIsNotHeldBack) {
  // Unlike PostgreSQL's (a statement's snapshot), a GET_LOCK wait in autocommit touches no InnoDB
  // table: no transaction, no read view, purge goes on (doc/database-facts.md §6). A wait inside a
  // transaction that had read a table would show here as the waiter's row in innodb_trx.
  auto locks = manager();
  ASSERT_EQ(admin_->query(fmt::format("SELECT GET_LOCK({}, 0)", full_name("purge"))).at(0), "1");
  auto waiter = std::async(std::launch::async, [&] { return locks->acquire("purge", 20s).token(); });
  ASSERT_TRUE(dblock::test::eventually([&] {
    return other_->query("SELECT count(*) FROM information_schema.processlist WHERE state LIKE '%user lock%'").at(0) !=
           "0";
  }));
  EXPECT_EQ(other_
                ->query("SELECT count(*) FROM information_schema.innodb_trx t JOIN information_schema.processlist p "
                        "ON p.id = t.trx_mysql_thread_id WHERE p.state LIKE '%user lock%'")
                .at(0),
            "0");
  admin_->query(fmt::format("SELECT RELEASE_LOCK({})", full_name("purge")));
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  EXPECT_GT(waiter.get(), 0);
}

TEST_F(MySql, AGetLockDeadlockIsBrokenAndTheWaiterBacksOffInsteadOfSpinning) {
  // a holds p and waits for q; b holds q and asks for p: MariaDB reports the cycle to b at once
  // (1213). b keeps waiting until its deadline, backing off, so its round trips stay few.
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn_));
  auto proxied = dblock::Store::open(installation_->dsn_on(dblock::test::with_port(server_dsn_, proxy.port())));
  dblock::LockManager a(store_, {.mode = dblock::LockMode::advisory, .owner_scope = dblock::OwnerScope::manager});
  dblock::LockManager b(proxied, {.mode = dblock::LockMode::advisory});
  auto p = a.try_acquire("p");
  auto q = b.try_acquire("q");
  ASSERT_TRUE(p && q);
  auto a_waits = std::async(std::launch::async, [&] { return a.acquire("q", 20s).token(); });
  // a's session (the one holding p) waits in GET_LOCK for q before b closes the cycle.
  auto a_session = admin_->query(fmt::format("SELECT IS_USED_LOCK({})", full_name("p"))).at(0);
  ASSERT_TRUE(dblock::test::eventually([&] {
    return other_
               ->query(fmt::format("SELECT count(*) FROM information_schema.processlist WHERE id = {} AND state "
                                   "LIKE '%user lock%'",
                                   a_session))
               .at(0) == "1";
  }));
  proxy.reset_round_trips();
  auto started = std::chrono::steady_clock::now();
  try {
    (void)b.acquire("p", 1s);
    ADD_FAILURE() << "b cannot get p while a holds it";
  } catch (const dblock::Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("1213"), std::string::npos) << "the timeout names the deadlock: " << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - started, 1s);
  EXPECT_LT(proxy.round_trips(), 40u) << "a deadlock detected at once must not make the waiter spin";
  auto q_token = q->token();
  q->release();
  ASSERT_EQ(a_waits.wait_for(10s), std::future_status::ready) << "a got q once b let go";
  EXPECT_GT(a_waits.get(), q_token);
}

TEST_F(MySql, NamesOverTheServersLimitInCharactersOrBytesAreLockedUnderTheirSha2) {
  auto locks = manager();
  std::string emoji = "\xF0\x9F\x94\x92";  // U+1F512, four bytes
  auto base = full_name("").size() - 2;    // 'dblock.<prefix>:' without the quotes, all ASCII
  std::string name;
  for (std::size_t i = 0; i < 63 - base; ++i) name += emoji;  // 63 characters in full...
  ASSERT_GT(base + name.size(), 192u) << "...but over 192 bytes";
  auto held = locks->try_acquire(name);
  ASSERT_TRUE(held) << "MariaDB refuses such a name unhashed";
  auto hashed = fmt::format("SHA2({}, 256)", full_name(name));
  EXPECT_NE(admin_->query(fmt::format("SELECT IS_USED_LOCK({})", hashed)).at(0), "") << "held under SHA2(full name)";
  EXPECT_TRUE(admin_->advisory_held(name)) << "the test admin maps names the same way";
}

TEST_F(MySql, NamesLongerThan64CharactersAreLockedUnderTheirSha2) {
  auto locks = manager();
  std::string name(200, 'n');
  auto held = locks->try_acquire(name);
  ASSERT_TRUE(held);
  auto hashed = fmt::format("SHA2({}, 256)", full_name(name));
  EXPECT_NE(admin_->query(fmt::format("SELECT IS_USED_LOCK({})", hashed)).at(0), "") << "held under SHA2(full name)";
  EXPECT_EQ(admin_->query(fmt::format("SELECT GET_LOCK({}, 0)", hashed)).at(0), "0");
  auto short_name = std::string(64 - full_name("").size() + 2, 's');  // exactly 64 characters in full
  auto short_held = locks->try_acquire(short_name);
  ASSERT_TRUE(short_held);
  EXPECT_NE(admin_->query(fmt::format("SELECT IS_USED_LOCK({})", full_name(short_name))).at(0), "")
      << "64 characters are used as they are";
}

TEST_F(MySql, TwoInstallationsOnOneServerDoNotCollide) {
  auto other_prefix = dblock::test::unique_prefix();
  auto other_store = dblock::Store::open(dblock::test::with_params(server_dsn_, "prefix=" + other_prefix));
  dblock::migrate(*other_store);
  dblock::LockManager here(store_, {.mode = dblock::LockMode::advisory});
  dblock::LockManager there(other_store, {.mode = dblock::LockMode::advisory});
  auto a = here.try_acquire("same-name");
  auto b = there.try_acquire("same-name");
  EXPECT_TRUE(a && b) << "GET_LOCK names carry the database and the table prefix";
}

TEST_F(MySql, EveryStatementSetSharesOneSessionWithoutTheirPreparedStatementsColliding) {
  // Every statement set (the engine check at connect, table mode, groups, combined statements,
  // migrations, occurrences, a fenced transaction with callers' statements, the reaper, the bench
  // floor and GET_LOCK mode) prepares its statements on whichever pooled session it gets, cached
  // by id: with one session in the pool, all of them meet on it.
  auto one_session = dblock::Store::open(installation_->dsn("pool=1"));
  for (int round = 0; round < 2; ++round) {
    dblock::test::run_every_statement_set(one_session, round);
    if (HasFatalFailure()) return;
    dblock::LockManager named(one_session, {.mode = dblock::LockMode::advisory});
    auto lock = named.try_acquire("one-session");
    ASSERT_TRUE(lock);
    auto first_token = lock->token();
    EXPECT_GT(first_token, 0);
    lock->release();
    auto long_name = named.try_acquire(std::string(100, 'n'));  // hashed by the server
    ASSERT_TRUE(long_name);
    long_name->release();
    auto waited = named.acquire("one-session", 2s);
    EXPECT_GT(waited.token(), first_token);
    waited.release();
  }
}

TEST_F(MySql, WhatGetLockCannotExpressIsRefusedBeforeAnythingIsSent) {
  auto locks = manager();
  EXPECT_THROW((void)locks->try_acquire("x", {.shared = true}), dblock::InvalidArgument);
  EXPECT_THROW((void)locks->try_acquire(dblock::AdvisoryKey::of(42)), dblock::InvalidArgument);
  EXPECT_THROW((void)locks->try_acquire("x", {.ttl = 5s}), dblock::InvalidArgument);
  EXPECT_TRUE(locks->try_acquire("x")) << "nothing was left behind by the refusals";
}

TEST_F(MySql, AFailedTryLeavesTheHoldersRowUntouched) {
  // ON DUPLICATE KEY UPDATE assigns left to right: a naive translation lets a failed try reset
  // the holder's count and token (doc/database-facts.md §2).
  auto a = manager(dblock::LockMode::table);
  auto b = manager(dblock::LockMode::table);
  auto outer = a->try_acquire("odku");
  auto inner = a->try_acquire("odku");
  ASSERT_TRUE(outer && inner);
  auto before = store_->locks().at(0);
  EXPECT_FALSE(b->try_acquire("odku"));
  auto after = store_->locks().at(0);
  EXPECT_EQ(after.owner, before.owner);
  EXPECT_EQ(after.count, 2);
  EXPECT_EQ(after.token, before.token);
  EXPECT_GE(after.remaining, before.remaining - 1s) << "the lease was not touched either";
}

TEST_F(MySql, TheSqlApiExcludesOtherOwnersUnderClientFoundRows) {
  // 0001's acquire decided by ROW_COUNT(), which CLIENT_FOUND_ROWS turns into "1" for an upsert
  // that changed nothing: the second owner was granted the lock and overwrote the token.
  auto a = dblock::test::make_admin("mysql", server_dsn_, "dblock", prefix_, true);
  auto b = dblock::test::make_admin("mysql", server_dsn_, "dblock", prefix_, true);
  a->exec("CREATE TEMPORARY TABLE found_rows_probe (x INT)");
  a->exec("INSERT INTO found_rows_probe VALUES (1)");
  a->exec("UPDATE found_rows_probe SET x = 1");
  ASSERT_EQ(a->query("SELECT ROW_COUNT()").at(0), "1") << "the session must really count found rows";
  for (std::string function : {"acquire", "acquire_held"}) {
    auto name = "api-" + function;
    auto extra = function == "acquire_held" ? ", 0" : "";
    auto call = [&](dblock::test::Admin& session, const std::string& owner) {
      return session.query(fmt::format("SELECT \"{}{}\"('{}', '{}', 5000000{})", prefix_, function, name, owner, extra))
          .at(0);
    };
    auto granted = call(*a, "owner-a");
    ASSERT_FALSE(granted.empty()) << function;
    EXPECT_EQ(call(*b, "owner-b"), "") << function << ": another owner's live lock must not be granted";
    auto rows = store_->locks();
    auto row = std::find_if(rows.begin(), rows.end(), [&](const auto& info) { return info.name == name; });
    ASSERT_NE(row, rows.end());
    EXPECT_EQ(row->owner, "owner-a");
    EXPECT_EQ(fmt::format("1 {}", row->token), granted) << function << ": the holder's token must stay";
  }
}

// A row another transaction holds locked past its lease (a fence, or a takeover in flight) is its
// next owner's to wait for, as a waiter: a try's statement gives way after 1 s (1205) and answers
// busy, nothing taken; a waiting acquisition takes the row over once it is free.
TEST_F(MySql, ATryOnARowAnotherTransactionHoldsAnswersBusyAndAWaiterTakesItOverOnceFree) {
  auto a = manager(dblock::LockMode::table);
  ASSERT_TRUE(a->try_acquire("row-locked"));
  admin_->expire("row-locked");
  dblock::LockManager b(store_);
  other_->exec("START TRANSACTION");
  other_->query(fmt::format("SELECT name FROM \"{}locks\" WHERE name = 'row-locked' FOR UPDATE", prefix_));
  auto tried = std::async(std::launch::async, [&] { return b.try_acquire("row-locked").has_value(); });
  ASSERT_EQ(tried.wait_for(20s), std::future_status::ready) << "the try waited for the transaction";
  EXPECT_FALSE(tried.get()) << "a try was granted a row another transaction held";
  auto taker = std::async(std::launch::async, [&] { return b.acquire("row-locked", 60s).token(); });
  EXPECT_EQ(taker.wait_for(0s), std::future_status::timeout);
  other_->exec("COMMIT");
  ASSERT_EQ(taker.wait_for(30s), std::future_status::ready);
  EXPECT_GT(taker.get(), 0) << "the waiter took the expired lock over once the row was free";
}

// GET_LOCK's cut bound (doc/guarantees.md, "Cut"): a pinned session's wait_timeout is the longest its
// live owner leaves it silent, the check interval (TTL/3 here) + TTL + 2 s, in whole seconds.
constexpr auto kShortTtl = 2s;
constexpr std::chrono::seconds pinned_wait_timeout(std::chrono::milliseconds ttl) {
  return std::chrono::ceil<std::chrono::seconds>(ttl / 3 + ttl + 2s);
}

TEST_F(MySql, ALiveGetLockHolderOutlastsItsSessionsWaitTimeoutWhichEndsTheSessionOnceItGoesSilent) {
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn_));
  auto proxied = dblock::Store::open(installation_->dsn_on(dblock::test::with_port(server_dsn_, proxy.port())));
  dblock::LockManager holder(proxied, {.mode = dblock::LockMode::advisory, .default_ttl = kShortTtl});
  auto lock = holder.try_acquire("idle-holder");
  ASSERT_TRUE(lock);
  // Idle for longer than the session's wait_timeout (several TTLs): the watchdog's checks keep it.
  std::this_thread::sleep_for(pinned_wait_timeout(kShortTtl) + 1s);
  EXPECT_FALSE(lock->lost());
  EXPECT_GT(lock->token(), 0) << "a statement on the pinned session: alive, and the lock on it";
  EXPECT_EQ(admin_->query(fmt::format("SELECT GET_LOCK({}, 0)", full_name("idle-holder"))).at(0), "0");
  // The same session silenced (nothing forwarded, both ends open): the server ends it by its
  // wait_timeout and lets go of the lock, as it would for a holder cut off by the network.
  auto stalled = std::chrono::steady_clock::now();
  proxy.set_stalled(true);
  auto other = manager();
  EXPECT_TRUE(dblock::test::eventually([&] { return other->try_acquire("idle-holder").has_value(); },
                                       pinned_wait_timeout(kShortTtl) + 3s))
      << "the silent session kept its lock past its wait_timeout";
  EXPECT_GE(std::chrono::steady_clock::now() - stalled, kShortTtl) << "ended before its live owner would miss it";
  EXPECT_TRUE(dblock::test::eventually([&] { return lock->lost(); }, 10s)) << "lost at its deadline";
  proxy.set_down(true);  // the holder's statements in flight fail now, not at their timeouts
}

TEST_F(MySql, ASessionGivenBackByAGetLockOwnerServesTheNextOwnerAfterAPauseLongerThanItsWaitTimeout) {
  // One pooled session: every owner gets the same one, unless the server ended it (a new one opens).
  auto one_session = installation_->open_store("pool=1");
  dblock::LockManager locks(one_session, {.mode = dblock::LockMode::advisory, .default_ttl = kShortTtl});
  auto session_holding = [&](const std::string& name) {
    return admin_->query(fmt::format("SELECT IS_USED_LOCK({})", full_name(name))).at(0);
  };
  std::string first;
  {
    auto lock = locks.try_acquire("given-back");
    ASSERT_TRUE(lock);
    first = session_holding("given-back");
  }
  // The owner's session lingers until the watchdog gives it back (a check interval or two) with the
  // server's wait_timeout; it then idles in the pool past the short one.
  std::this_thread::sleep_for(pinned_wait_timeout(kShortTtl) + 1s);
  auto next_owner = std::async(std::launch::async, [&] {
    auto lock = locks.try_acquire("given-back");
    return lock ? session_holding("given-back") : std::string("not granted");
  });
  ASSERT_EQ(next_owner.wait_for(20s), std::future_status::ready);
  EXPECT_EQ(next_owner.get(), first)
      << "the pooled session outlived the pause: the short wait_timeout went with its pin";
  auto again = locks.try_acquire("given-back");
  ASSERT_TRUE(again) << "the first owner pins it again";
  EXPECT_EQ(session_holding("given-back"), first);
}

TEST_F(MySql, AnIdleSessionTheServerEndedUnderItsOwnerFailsNoAcquisition) {
  // The owner's session lingers after its last release (until an unused check interval, 10 s
  // here); the server ends it meanwhile, as wait_timeout does after a long pause of the process.
  auto locks = manager();
  std::string ended;
  {
    auto lock = locks->try_acquire("ended-idle");
    ASSERT_TRUE(lock);
    ended = admin_->query(fmt::format("SELECT IS_USED_LOCK({})", full_name("ended-idle"))).at(0);
  }
  admin_->exec("KILL CONNECTION " + ended);
  auto again = locks->try_acquire("ended-idle");
  ASSERT_TRUE(again) << "held nothing, lost nothing: taken on a fresh session";
  EXPECT_NE(admin_->query(fmt::format("SELECT IS_USED_LOCK({})", full_name("ended-idle"))).at(0), ended);
}

}  // namespace
