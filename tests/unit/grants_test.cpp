// The policy behind least-privilege roles, without a server: which GRANT statements a runtime role
// gets, and which migration rights SHOW GRANTS rows leave missing (the server tests in
// conformance/migration_test.cpp run both against real roles).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>
#include <dblock/migrate.hpp>

#include "backends/mysql/my_rights.hpp"
#include "backends/runtime_grants.hpp"

using namespace dblock::detail;

namespace {

const MyMigrationNeeds kFreshInstall{.create_tables = {"p_schema_history", "p_token_seq", "p_locks"},
                                     .create_routines = {"p_acquire", "p_release"},
                                     .replace_routines = {"p_acquire", "p_release"},
                                     .history = "p_schema_history"};

std::vector<std::string> missing(std::vector<std::string> rows, std::string_view database = "app") {
  return missing_mysql_migration_rights(rows, database, kFreshInstall);
}

const std::vector<CatalogObject> kObjects{
    {"table", "p_schema_history", "", {}, ""}, {"sequence", "p_token_seq", "", {}, ""},
    {"table", "p_locks", "", {}, ""},          {"index", "p_locks_pkey", "p_locks", {}, ""},
    {"function", "p_acquire", "", {}, ""},     {"function", "p_acquire", "", {}, ""}};

}  // namespace

TEST(MySqlRights, GlobalAllAndDatabaseWideGrantsLackNothing) {
  EXPECT_TRUE(missing({"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"}).empty());
  EXPECT_TRUE(missing({"GRANT USAGE ON *.* TO `m`@`%`",
                       "GRANT SELECT, INSERT, UPDATE, CREATE, CREATE ROUTINE, ALTER ROUTINE ON `app`.* TO `m`@`%`"})
                  .empty());
}

TEST(MySqlRights, DataRightsOnlyNameEveryMissingCreateRight) {
  auto lacking = missing({"GRANT USAGE ON *.* TO `m`@`%` IDENTIFIED BY PASSWORD '*AB12'",
                          "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.* TO `m`@`%`"});
  ASSERT_EQ(lacking.size(), 3u);
  EXPECT_EQ(lacking[0], "CREATE on `app`.* (to create `p_schema_history`, `p_token_seq`, `p_locks`)");
  EXPECT_EQ(lacking[1], "CREATE ROUTINE on `app`.* (to create `p_acquire`, `p_release`)");
  EXPECT_EQ(lacking[2], "ALTER ROUTINE on `app`.* (for CREATE OR REPLACE FUNCTION `p_acquire`, `p_release`)");
  for (auto& right : lacking) EXPECT_EQ(right.find("AB12"), std::string::npos) << "no password hash";
}

TEST(MySqlRights, WildcardDatabasePatternsMatchAsTheServerDoes) {
  std::string rights = "CREATE, CREATE ROUTINE, ALTER ROUTINE, SELECT, INSERT, UPDATE";
  EXPECT_TRUE(missing({"GRANT " + rights + " ON `a%`.* TO `m`@`%`"}).empty());
  EXPECT_TRUE(missing({"GRANT " + rights + " ON `a_p`.* TO `m`@`%`"}).empty());
  EXPECT_FALSE(missing({"GRANT " + rights + " ON `a\\_p`.* TO `m`@`%`"}).empty()) << "\\_ is a literal underscore";
  EXPECT_TRUE(missing({"GRANT " + rights + " ON `a\\_p`.* TO `m`@`%`"}, "a_p").empty());
  EXPECT_FALSE(missing({"GRANT " + rights + " ON `apps`.* TO `m`@`%`"}).empty());
}

TEST(MySqlRights, RoleAndPublicGrantsCountAndUnlistedRolesRefuseNothing) {
  std::vector<std::string> with_role{"GRANT `migrator` TO `m`@`%`", "GRANT USAGE ON *.* TO `m`@`%`",
                                     "GRANT USAGE ON *.* TO `migrator`",
                                     "GRANT CREATE, CREATE ROUTINE, ALTER ROUTINE ON `app`.* TO `migrator`",
                                     "GRANT SELECT, INSERT, UPDATE ON `app`.* TO PUBLIC"};
  EXPECT_TRUE(missing(with_role).empty());
  // MySQL 8 lists a role's privileges only with USING: nothing is refused on a guess.
  EXPECT_TRUE(missing({"GRANT USAGE ON *.* TO `m`@`%`", "GRANT `migrator`@`%` TO `m`@`%`"}).empty());
}

TEST(MySqlRights, TableAndRoutineLevelGrantsCountForTheirObjectOnly) {
  auto lacking = missing({"GRANT CREATE ON `app`.`p_locks` TO `m`@`%`",
                          "GRANT SELECT (version, name), INSERT, UPDATE ON `app`.`p_schema_history` TO `m`@`%`",
                          "GRANT CREATE ROUTINE ON `app`.* TO `m`@`%`",
                          "GRANT EXECUTE, ALTER ROUTINE ON FUNCTION `app`.`P_ACQUIRE` TO `m`@`%`"});
  ASSERT_EQ(lacking.size(), 2u);
  EXPECT_EQ(lacking[0], "CREATE on `app`.* (to create `p_schema_history`, `p_token_seq`)");
  EXPECT_EQ(lacking[1], "ALTER ROUTINE on `app`.* (for CREATE OR REPLACE FUNCTION `p_release`)");
}

TEST(RuntimeGrants, PostgresGrantsDataRightsSequenceAndEachFunctionOnce) {
  auto text = postgres_runtime_grants("app", "p_", kObjects, "web");
  EXPECT_NE(text.find("GRANT USAGE ON SCHEMA \"app\" TO \"web\";"), std::string::npos) << text;
  EXPECT_NE(text.find("GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE \"app\".\"p_locks\" TO \"web\";"),
            std::string::npos);
  EXPECT_NE(text.find("GRANT SELECT ON TABLE \"app\".\"p_schema_history\" TO \"web\";"), std::string::npos);
  EXPECT_NE(text.find("GRANT USAGE ON SEQUENCE \"app\".\"p_token_seq\" TO \"web\";"), std::string::npos);
  EXPECT_EQ(text.find("CREATE ON"), std::string::npos);
  EXPECT_EQ(text.find("GRANT EXECUTE"), text.rfind("GRANT EXECUTE")) << "one grant per function";
  EXPECT_EQ(text.find("p_locks_pkey"), std::string::npos) << "indexes need no grant";
}

TEST(RuntimeGrants, MySqlAccountsDefaultToAnyHost) {
  auto text = mysql_runtime_grants("app", "p_", kObjects, "web");
  EXPECT_NE(text.find("GRANT SELECT, INSERT ON `app`.`p_token_seq` TO 'web'@'%';"), std::string::npos) << text;
  EXPECT_NE(mysql_runtime_grants("app", "p_", kObjects, "web@localhost").find("TO 'web'@'localhost';"),
            std::string::npos);
  EXPECT_NE(mysql_runtime_grants("a`b", "p_", kObjects, "web").find("`a``b`.`p_locks`"), std::string::npos);
}

TEST(RuntimeGrants, RolesThatCannotBeWrittenSafelyAreRefused) {
  for (const std::string& role : std::vector<std::string>{"", "a\"b", "a'b", "a\nb", "a\x1b[31m", std::string(64, 'r')})
    EXPECT_THROW((void)postgres_runtime_grants("app", "p_", kObjects, role), dblock::InvalidArgument) << role;
  for (std::string role : {"@localhost", "web@", "o'hara", "web@local'host"})
    EXPECT_THROW((void)mysql_runtime_grants("app", "p_", kObjects, role), dblock::InvalidArgument) << role;
}

// Registered only where the build holds the mysql backend: there is nothing of it to test without.
#if DBLOCK_TEST_WITH_MYSQL
TEST(RuntimeGrants, MySqlAndGaleraGrantExecuteOnTheCombinedFunctionsOfMigration0011) {
  // Read from the embedded migrations' text, as `dblock migrate grants` prints them (no server).
  for (const char* uri : {"mysql://u@127.0.0.1/app?prefix=p_", "mysql://u@127.0.0.1/app?prefix=p_&engine=galera"}) {
    auto text = dblock::Migrator::grants(uri, "web");
    for (const char* function : {"p_acquire_many", "p_release_last_many", "p_acquire_delayed"})
      EXPECT_NE(text.find(fmt::format("GRANT EXECUTE ON FUNCTION `app`.`{}` TO 'web'@'%';", function)),
                std::string::npos)
          << uri << "\n"
          << text;
  }
}
#endif
