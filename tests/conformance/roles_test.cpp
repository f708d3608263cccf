// Each backend hands out exactly the roles doc/architecture.md lists for its database, and says
// why it lacks each of the others (the message a caller of that role is told).

#include <string>
#include <string_view>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "backends/postgres/pg_xact_lock.hpp"
#include "core/store_parts.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

namespace {

/// What a case's backend must hand out: the roles every backend has are checked for all.
struct Expected {
  const char* advisory_absent_because = nullptr;  // nullptr: present
  const char* notifications_absent_because = nullptr;
  const char* xact_locks_absent_because = nullptr;
};

Expected expected_for(std::string_view label) {
  if (label == "postgres_table") return {};
  if (label == "pgbouncer_table") return {.advisory_absent_because = "pool_mode=transaction"};
  if (label == "mysql_table")
    return {.notifications_absent_because = "waiters poll", .xact_locks_absent_because = "need a PostgreSQL store"};
  if (label == "galera_table")
    return {.advisory_absent_because = "Galera cluster, where GET_LOCK is node-local",
            .notifications_absent_because = "waiters poll",
            .xact_locks_absent_because = "need a PostgreSQL store"};
  if (label == "sqlite")
    return {.advisory_absent_because = "sqlite has no advisory locks",
            .notifications_absent_because = "waiters poll",
            .xact_locks_absent_because = "need a PostgreSQL store"};
  ADD_FAILURE() << "no expected roles for " << label;
  return {};
}

template <class T>
void expect_role(const dblock::detail::Role<T>& role, const char* absent_because, std::string_view what) {
  if (absent_because == nullptr) {
    EXPECT_TRUE(role) << what << " should be present, but is absent: " << role.why_absent();
    EXPECT_TRUE(role.why_absent().empty()) << what;
    return;
  }
  ASSERT_FALSE(role) << what << " should be absent";
  EXPECT_NE(role.why_absent().find(absent_because), std::string::npos)
      << what << ": the reason '" << role.why_absent() << "' does not say '" << absent_because << "'";
  try {
    (void)role.get();
    ADD_FAILURE() << what << ": get() on an absent role did not throw";
  } catch (const dblock::InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), role.why_absent()) << what << ": get() throws the reason";
  }
}

class Roles : public ::testing::TestWithParam<dblock::test::BackendCase> {
 protected:
  static void TearDownTestSuite() { dblock::test::remove_embedded_sqlite(); }
};

TEST_P(Roles, EachBackendHasItsRolesAndSaysWhyItLacksTheOthers) {
  std::string server_dsn;
  DBLOCK_REQUIRE_BACKEND_DSN(server_dsn, GetParam());
  dblock::test::Installation installation(GetParam(), server_dsn, {.migrated = false});
  auto& backend = dblock::detail::StoreParts::backend(*installation.store());
  auto expected = expected_for(GetParam().label);

  // Every database has locks, groups, migrations, the bench floor, fences, occurrence records and
  // the fair queue.
  (void)backend.locks();
  expect_role(backend.groups(), nullptr, "groups");
  expect_role(backend.migrations(), nullptr, "migrations");
  expect_role(backend.bench(), nullptr, "bench");
  expect_role(backend.fences(), nullptr, "fences");
  expect_role(backend.occurrences(), nullptr, "occurrences");
  expect_role(backend.queue(), nullptr, "queue");
  expect_role(backend.advisory(), expected.advisory_absent_because, "advisory");
  expect_role(backend.notifications(), expected.notifications_absent_because, "notifications");
  expect_role(backend.xact_locks(), expected.xact_locks_absent_because, "xact_locks");
  // A store opened for production never has dblock::testing's control of leases.
  expect_role(backend.test_control(), "only a dblock::testing store", "test_control");

  auto migrations = backend.migrations();
  ASSERT_TRUE(migrations);
  EXPECT_EQ(migrations->dialect(), backend.dialect()) << "the migration role speaks the root's dialect";
  EXPECT_EQ(dblock::detail::to_string(backend.dialect()), GetParam().dialect);
}

INSTANTIATE_TEST_SUITE_P(Backends, Roles,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kPgBouncerTable, dblock::test::kMysqlTable,
                              dblock::test::kGaleraTable, dblock::test::kSqlite})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
