// An application's own SQL error inside Store::fenced is the application's (issue 52): a missing
// table of its own, or a right its role lacks on a table of its own, comes back as a DatabaseError
// with the server's message and SQLSTATE, never as dblock's advice (`dblock migrate up`,
// `dblock migrate grants`), which is about dblock's own tables. The fence itself is dblock's
// statement: a missing fence function still says to run `dblock migrate up`.

#include <memory>
#include <optional>
#include <string>
#include <typeinfo>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/installation.hpp"
#include "support/roles.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

class FenceErrors : public dblock::test::InstalledCaseTest {
 protected:
  void SetUp() override {
    InstalledCaseTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;  // no server: the base skipped or failed already
    dialect_ = GetParam().dialect;
  }

  /// A table name of the application's, quoted for the dialect, beside dblock's tables.
  [[nodiscard]] std::string table(const std::string& stem) const {
    auto name = installation_->prefix() + stem;
    return dialect_ == "mysql" ? fmt::format("`{}`", name) : fmt::format("\"{}\"", name);
  }

  /// The error `statement` fails with inside a transaction fenced by a lock of `store`; fails the
  /// test when it commits instead.
  static std::optional<dblock::Error> failure_in_fenced(dblock::Store& store, dblock::LockManager& manager,
                                                        const std::string& statement, bool query) {
    auto lock = manager.acquire("fence-errors/app", 5s);
    try {
      store.fenced(lock, [&](dblock::FencedTransaction& tx) {
        if (query) {
          (void)tx.query(statement);
        } else {
          (void)tx.execute(statement);
        }
      });
    } catch (const dblock::Error& e) {
      EXPECT_EQ(typeid(e), typeid(dblock::DatabaseError)) << "thrown as " << typeid(e).name() << ": " << e.what();
      return e;
    }
    ADD_FAILURE() << "the fenced transaction committed: " << statement;
    return std::nullopt;
  }

  /// The application's error: the server's words and SQLSTATE, nothing of dblock's advice.
  static void expect_application_error(const dblock::Error& error, const std::string& server_says,
                                       const std::string& sqlstate, const std::string& names) {
    std::string message = error.what();
    EXPECT_EQ(error.category(), dblock::ErrorCategory::database) << message;
    EXPECT_EQ(std::string(error.sqlstate()), sqlstate) << message;
    EXPECT_NE(message.find(server_says), std::string::npos) << message;
    EXPECT_NE(message.find(names), std::string::npos) << "the message names the application's table: " << message;
    EXPECT_EQ(message.find("migrate"), std::string::npos) << "dblock's advice for its own tables: " << message;
    EXPECT_EQ(message.find("dblock's tables"), std::string::npos) << message;
  }

  std::string dialect_;
};

TEST_P(FenceErrors, AMissingTableOfTheApplicationIsItsOwnErrorWithTheServersMessage) {
  auto manager = this->manager();
  auto missing = installation_->prefix() + "no_such_orders";
  const std::string server_says = dialect_ == "postgresql" ? "does not exist"
                                  : dialect_ == "mysql"    ? "doesn't exist"
                                                           : "no such table";
  const std::string sqlstate = dialect_ == "postgresql" ? "42P01" : dialect_ == "mysql" ? "42S02" : "";
  for (bool query : {true, false}) {
    auto statement = query ? fmt::format("SELECT id FROM {}", table("no_such_orders"))
                           : fmt::format("UPDATE {} SET id = 1", table("no_such_orders"));
    auto error = failure_in_fenced(*store_, *manager, statement, query);
    ASSERT_TRUE(error) << statement;
    expect_application_error(*error, server_says, sqlstate, missing);
  }
  // The store's sessions are fine after it: the next fenced transaction commits.
  installation_->admin().exec(fmt::format("CREATE TABLE {} (id INTEGER)", table("orders")));
  auto lock = manager->acquire("fence-errors/app", 5s);
  store_->fenced(lock, [&](dblock::FencedTransaction& tx) {
    EXPECT_EQ(tx.execute(fmt::format("INSERT INTO {} (id) VALUES (42)", table("orders"))), 1);
  });
  EXPECT_EQ(installation_->admin().query(fmt::format("SELECT count(*) FROM {}", table("orders"))).at(0), "1");
  installation_->admin().exec(fmt::format("DROP TABLE {}", table("orders")));
}

/// The servers with roles (SQLite has none: whoever can write the file has every right).
class FenceErrorsWithRoles : public FenceErrors {};

TEST_P(FenceErrorsWithRoles, ARightTheApplicationsRoleLacksOnItsOwnTableIsItsOwnErrorWithoutGrantsAdvice) {
  // A runtime role with exactly the grants `dblock migrate grants` prints, and no right at all on
  // the application's table.
  dblock::test::TestRole role(installation_->admin(), dialect_, server_dsn_, "r" + installation_->prefix());
  // Without a connection, the grants name Galera's objects only when the URI says it is one.
  auto grants_dsn = installation_->dsn(GetParam().nodes_env != nullptr ? "engine=galera" : "");
  ASSERT_GE(role.grant(dblock::Migrator::grants(grants_dsn, role.account())), 5);
  installation_->admin().exec(fmt::format("CREATE TABLE {} (id INTEGER)", table("secret")));
  auto store = dblock::Store::open(installation_->dsn_on(role.dsn()));
  dblock::LockManager manager(store, in_mode());
  const std::string server_says = dialect_ == "postgresql" ? "permission denied" : "command denied";
  const std::string sqlstate = dialect_ == "postgresql" ? "42501" : "42000";
  for (bool query : {true, false}) {
    auto statement = query ? fmt::format("SELECT id FROM {}", table("secret"))
                           : fmt::format("INSERT INTO {} (id) VALUES (1)", table("secret"));
    auto error = failure_in_fenced(*store, manager, statement, query);
    ASSERT_TRUE(error) << statement;
    expect_application_error(*error, server_says, sqlstate, installation_->prefix() + "secret");
    EXPECT_EQ(std::string(error->what()).find("grants"), std::string::npos) << error->what();
  }
  EXPECT_EQ(installation_->admin().query(fmt::format("SELECT count(*) FROM {}", table("secret"))).at(0), "0");
  installation_->admin().exec(fmt::format("DROP TABLE {}", table("secret")));
}

TEST_P(FenceErrors, AMissingFenceFunctionIsStillDblocksMissingSchema) {
  // The fence is dblock's own statement: without its function (or SQLite's view) the installation
  // is incomplete, and the advice stands.
  auto& prefix = installation_->prefix();
  installation_->admin().exec(
      dialect_ == "postgresql" ? fmt::format("DROP FUNCTION \"public\".\"{}fence\"(text, bigint)", prefix)
      : dialect_ == "mysql"    ? fmt::format("DROP PROCEDURE `{}fence_begin`", prefix)  // a plain lock's first fence
                               : fmt::format("DROP VIEW \"{}fence\"", prefix));
  auto manager = this->manager();
  auto lock = manager->acquire("fence-errors/dblock", 5s);
  try {
    store_->fenced(lock, [](dblock::FencedTransaction&) { ADD_FAILURE() << "the work ran without a fence"; });
    ADD_FAILURE() << "fenced without the fence function";
  } catch (const dblock::SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("dblock migrate up"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, FenceErrors,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable, dblock::test::kSqlite,
                                                                  dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

INSTANTIATE_TEST_SUITE_P(Backends, FenceErrorsWithRoles,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
