// The migrator as a DBA meets it, on every backend: fresh and existing databases, schemas and
// prefixes side by side, concurrent `migrate up` processes, drift, newer databases, failures that
// leave nothing behind, and `migrate sql` output that is the same schema as `up`.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "core/store_parts.hpp"
#include "migrate/migration_engine.hpp"
#include "support/admin.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/roles.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

class Migrations : public ::testing::TestWithParam<dblock::test::BackendCase> {
 protected:
  static void TearDownTestSuite() { dblock::test::remove_embedded_sqlite(); }

  void SetUp() override {
    DBLOCK_REQUIRE_BACKEND_DSN(server_dsn_, GetParam());
    sqlite_ = std::string(GetParam().dialect) == "sqlite";
    mysql_ = std::string(GetParam().dialect) == "mysql";
    installation_ = std::make_unique<dblock::test::Installation>(GetParam(), server_dsn_,
                                                                 dblock::test::InstallationSetup{.migrated = false});
    prefix_ = installation_->prefix();
    admin_ = &installation_->admin();
  }

  [[nodiscard]] std::string schema() const { return dblock::test::default_schema(GetParam()); }
  /// The server DSN with `prefix` and `extra` URI parameters ("schema=x").
  [[nodiscard]] std::string dsn(const std::string& prefix, const std::string& extra = "") const {
    return dblock::test::with_params(server_dsn_, "prefix=" + prefix + (extra.empty() ? "" : "&" + extra));
  }
  [[nodiscard]] std::string history() const { return admin_->history_table(); }
  int count(const std::string& sql) { return std::stoi(admin_->query(sql).at(0)); }

  /// Every version this build ships, in the given state.
  static std::vector<dblock::MigrationState> all(dblock::MigrationState state) {
    return std::vector<dblock::MigrationState>(static_cast<std::size_t>(dblock::latest_schema_version()), state);
  }
  static std::vector<int> all_versions() {
    std::vector<int> versions;
    for (int v = 1; v <= dblock::latest_schema_version(); ++v) versions.push_back(v);
    return versions;
  }

  std::vector<dblock::MigrationState> states(dblock::Migrator& migrator) {
    std::vector<dblock::MigrationState> out;
    for (auto& status : migrator.status()) out.push_back(status.state);
    return out;
  }

  /// Every object with this prefix, normalised so two prefixes compare equal: columns, indexes and
  /// functions (PostgreSQL) or the stored CREATE statements (SQLite).
  std::vector<std::string> catalog(const std::string& prefix) {
    auto starts = [&](const std::string& column) {
      return fmt::format("substr({}, 1, {}) = '{}'", column, prefix.size(), prefix);
    };
    std::vector<std::string> rows;
    auto add = [&](const std::string& sql) {
      for (auto& row : admin_->query(sql)) {
        for (std::size_t at; (at = row.find(prefix)) != std::string::npos;) row.replace(at, prefix.size(), "<P>");
        rows.push_back(row);
      }
    };
    if (sqlite_) {
      add(
          fmt::format("SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_master WHERE {} "
                      "ORDER BY name",
                      starts("name")));
    } else if (mysql_) {
      add(
          fmt::format("SELECT table_name || ' ' || table_type || ' ' || coalesce(engine, '') || ' ' || "
                      "coalesce(table_collation, '') FROM information_schema.tables "
                      "WHERE table_schema = DATABASE() AND {} ORDER BY 1",
                      starts("table_name")));
      add(
          fmt::format("SELECT table_name || '.' || column_name || ' ' || column_type || ' ' || is_nullable || ' ' || "
                      "coalesce(column_default, '') || ' ' || coalesce(collation_name, '') "
                      "FROM information_schema.columns WHERE table_schema = DATABASE() AND {} ORDER BY 1",
                      starts("table_name")));
      add(
          fmt::format("SELECT table_name || ' ' || index_name || ' ' || column_name || ' ' || seq_in_index "
                      "FROM information_schema.statistics WHERE table_schema = DATABASE() AND {} ORDER BY 1",
                      starts("table_name")));
      add(
          fmt::format("SELECT routine_name || ' ' || data_type || ' ' || routine_definition "
                      "FROM information_schema.routines WHERE routine_schema = DATABASE() AND {} ORDER BY 1",
                      starts("routine_name")));
    } else {
      add(
          fmt::format("SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || "
                      "coalesce(column_default, '') || ' ' || coalesce(collation_name, '') "
                      "FROM information_schema.columns WHERE table_schema = 'public' AND {} ORDER BY 1",
                      starts("table_name")));
      add(fmt::format("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND {} ORDER BY 1",
                      starts("tablename")));
      add(
          fmt::format("SELECT pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                      "WHERE n.nspname = 'public' AND {} ORDER BY 1",
                      starts("proname")));
      add(
          fmt::format("SELECT sequencename || ' ' || data_type::text || ' ' || cache_size FROM pg_sequences "
                      "WHERE schemaname = 'public' AND {} ORDER BY 1",
                      starts("sequencename")));
    }
    return rows;
  }

  std::string server_dsn_;
  std::string prefix_;
  bool sqlite_ = false;
  bool mysql_ = false;
  std::unique_ptr<dblock::test::Installation> installation_;
  dblock::test::Admin* admin_ = nullptr;
};

TEST_P(Migrations, FreshDatabaseThenIdempotent) {
  auto store = dblock::Store::open(dsn(prefix_));
  dblock::Migrator migrator(store);
  EXPECT_EQ(states(migrator), all(dblock::MigrationState::pending));
  EXPECT_THROW(dblock::LockManager unmigrated(store), dblock::SchemaError);
  auto first = migrator.up();
  EXPECT_EQ(first.applied, all_versions());
  EXPECT_EQ(first.current_version, dblock::latest_schema_version());
  EXPECT_EQ(states(migrator), all(dblock::MigrationState::applied));
  auto second = migrator.up();
  EXPECT_TRUE(second.applied.empty());
  EXPECT_NO_THROW(migrator.verify());
  EXPECT_EQ(count("SELECT count(*) FROM " + history() + " WHERE success"), dblock::latest_schema_version());
  dblock::LockManager locks(store);  // the schema check passes now
  EXPECT_TRUE(locks.try_acquire("after-migrate"));
}

/// The suites that need database roles: SQLite has none (whoever can write the file has every right).
class RoleMigrations : public Migrations {};

TEST_P(RoleMigrations, ThePrintedGrantsAreAllARuntimeRoleNeedsAndUpNeedsNoCreateRight) {
  dblock::migrate(*dblock::Store::open(dsn(prefix_)));  // the deploy step, by the role owning dblock's objects
  // The runtime role of an init container and of the application: exactly what `migrate grants` prints.
  dblock::test::TestRole role(*admin_, GetParam().dialect, server_dsn_, "r" + prefix_);
  EXPECT_GE(role.grant(dblock::Migrator::grants(dsn(prefix_), role.account())), 5);
  auto store = dblock::Store::open(installation_->dsn_on(role.dsn()));
  dblock::Migrator migrator(store);
  auto result = migrator.up();  // the init container's step: it failed before with "permission denied for schema"
  EXPECT_TRUE(result.applied.empty());
  EXPECT_EQ(result.current_version, dblock::latest_schema_version());
  EXPECT_EQ(states(migrator), all(dblock::MigrationState::applied));
  // MySQL shows routine bodies only to their definer: compared where visible, never a false alarm.
  EXPECT_NO_THROW(migrator.verify());

  // Table mode: grant, renewals by the watchdog, a waiter woken by a release, listing, release.
  // 2 s leases: with 300 ms, under ASan beside other tests, the lease was lost before the release.
  dblock::LockManager locks(store, {.default_ttl = 2s});
  auto held = locks.try_acquire("runtime-role");
  ASSERT_TRUE(held);
  EXPECT_TRUE(dblock::test::eventually([&] { return locks.stats().renewals >= 2; })) << "the watchdog renews";
  EXPECT_FALSE(held->lost());
  EXPECT_EQ(store->locks().size(), 1u);
  std::string release_error;
  std::thread releaser([&] {
    try {
      held->release();
    } catch (const std::exception& e) {
      release_error = e.what();
    }
  });
  dblock::LockManager other(store, {.default_ttl = 2s});
  std::optional<dblock::Lock> taken;
  EXPECT_NO_THROW(taken = other.acquire("runtime-role", 10s));
  releaser.join();
  EXPECT_EQ(release_error, "");
  // Advisory mode: PostgreSQL's advisory_lock function and token sequence, MySQL's GET_LOCK and NEXTVAL.
  dblock::LockManager advisory(store, {.mode = dblock::LockMode::advisory, .default_ttl = 2s});
  auto advisory_held = advisory.try_acquire("runtime-role-advisory");
  ASSERT_TRUE(advisory_held);
  EXPECT_GT(advisory_held->token(), 0);
  // An operator's force-release and the reaper.
  EXPECT_TRUE(store->force_release("runtime-role"));
  EXPECT_TRUE(dblock::test::eventually([&] { return taken->lost(); })) << "the holder learns of it";
  admin_->insert_expired("abandoned/", 3);
  auto cycle = dblock::Reaper(store).run_once();
  EXPECT_TRUE(cycle.ok) << cycle.error;
  EXPECT_EQ(cycle.rows, 3u);
}

TEST_P(RoleMigrations, UpWithoutTheRightToCreateFailsNamingItAndLeavesNothingBehind) {
  // A role with every data right on the database and no right to create anything. On PostgreSQL
  // through the predefined roles, not GRANT ... ON ALL TABLES IN SCHEMA public: that rewrites the
  // ACL of every table there, other tests' too, and their concurrent ALTER TABLE (a migration's
  // 0008) failed with "tuple concurrently updated".
  dblock::test::TestRole role(*admin_, GetParam().dialect, server_dsn_, "r" + prefix_);
  role.exec(mysql_ ? "GRANT SELECT, INSERT, UPDATE, DELETE ON dblock.* TO {role}"
                   : "GRANT pg_read_all_data, pg_write_all_data TO {role}");
  auto before = catalog(prefix_);
  auto role_dsn = installation_->dsn_on(role.dsn());
  try {
    dblock::Migrator(dblock::Store::open(role_dsn)).up();
    ADD_FAILURE() << "migrate up without CREATE rights succeeded";
  } catch (const dblock::PermissionDenied& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(mysql_ ? "CREATE on `dblock`.*" : "CREATE on schema public"), std::string::npos) << message;
    EXPECT_NE(message.find("Nothing was changed"), std::string::npos) << message;
  }
  EXPECT_EQ(catalog(prefix_), before);
  EXPECT_FALSE(admin_->table_exists(prefix_ + "schema_history"));

  // Enough to create tables but not functions: refused as a whole, not half applied (MySQL's DDL
  // is not transactional).
  role.exec(mysql_ ? "GRANT CREATE ON dblock.* TO {role}" : "GRANT CREATE ON SCHEMA public TO {role}");
  if (mysql_) {
    try {
      dblock::Migrator(dblock::Store::open(role_dsn)).up();
      ADD_FAILURE() << "migrate up without CREATE ROUTINE succeeded";
    } catch (const dblock::PermissionDenied& e) {
      EXPECT_NE(std::string(e.what()).find("CREATE ROUTINE on `dblock`.*"), std::string::npos) << e.what();
    }
    EXPECT_EQ(catalog(prefix_), before);
    EXPECT_FALSE(admin_->table_exists(prefix_ + "schema_history"));
    // MariaDB runs CREATE OR REPLACE FUNCTION only with ALTER ROUTINE, even for a new function.
    role.exec("GRANT CREATE ROUTINE ON dblock.* TO {role}");
    try {
      dblock::Migrator(dblock::Store::open(role_dsn)).up();
      ADD_FAILURE() << "migrate up without ALTER ROUTINE succeeded";
    } catch (const dblock::PermissionDenied& e) {
      EXPECT_NE(std::string(e.what()).find("ALTER ROUTINE on `dblock`.*"), std::string::npos) << e.what();
    }
    EXPECT_EQ(catalog(prefix_), before);
    role.exec("GRANT ALTER ROUTINE, ALTER ON dblock.* TO {role}");  // ALTER: 0008 adds a column
  }
  // With the rights doc/migrations.md lists for a migrating role, the same role migrates.
  auto result = dblock::Migrator(dblock::Store::open(role_dsn)).up();
  EXPECT_EQ(result.applied, all_versions());
}

TEST_P(RoleMigrations, AnUpgradeByARoleThatDoesNotOwnTheFunctionsItRedefinesIsRefusedUnchanged) {
  dblock::Migrator(dblock::Store::open(dsn(prefix_))).up(2);  // installed by the owner; 0003 re-defines acquire
  dblock::test::TestRole role(*admin_, GetParam().dialect, server_dsn_, "r" + prefix_);
  // Rights to create anything and to write the history, but the functions are another role's.
  role.exec(mysql_ ? "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, CREATE ROUTINE ON dblock.* TO {role}"
                   : "GRANT CREATE, USAGE ON SCHEMA public TO {role}");
  if (!mysql_) role.exec("GRANT pg_read_all_data, pg_write_all_data TO {role}");  // see above: not ON ALL TABLES
  auto before = catalog(prefix_);
  try {
    dblock::Migrator(dblock::Store::open(installation_->dsn_on(role.dsn()))).up();
    ADD_FAILURE() << "an upgrade re-defining another role's functions succeeded";
  } catch (const dblock::PermissionDenied& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(mysql_ ? "ALTER ROUTINE on `dblock`.*" : "ownership of function"), std::string::npos)
        << message;
    EXPECT_NE(message.find(prefix_ + "acquire"), std::string::npos) << message;
  }
  EXPECT_EQ(catalog(prefix_), before);
  EXPECT_EQ(count("SELECT count(*) FROM " + history()), 2) << "no record of a failed 0003";
}

TEST_P(Migrations, ExistingUnrelatedTablesAreLeftIntact) {
  auto unrelated = prefix_ + "orders";  // even a table sharing our prefix, if it is not ours
  admin_->exec(fmt::format("CREATE TABLE \"{}\" (id integer PRIMARY KEY, note text)", unrelated));
  admin_->exec(fmt::format("INSERT INTO \"{}\" VALUES (1, 'keep me')", unrelated));
  dblock::migrate(*dblock::Store::open(dsn(prefix_)));
  EXPECT_EQ(admin_->query(fmt::format("SELECT note FROM \"{}\"", unrelated)), std::vector<std::string>{"keep me"});
  EXPECT_TRUE(admin_->table_exists(prefix_ + "locks"));
}

TEST_P(Migrations, TwoInstallationsSideBySideAreIndependent) {
  auto other = dblock::test::unique_prefix();
  auto a = dblock::Store::open(dsn(prefix_));
  auto b = dblock::Store::open(dsn(other));
  dblock::migrate(*a);
  dblock::migrate(*b);
  dblock::LockManager in_a(a);
  dblock::LockManager in_b(b);
  auto held_a = in_a.try_acquire("shared-name");
  auto held_b = in_b.try_acquire("shared-name");
  EXPECT_TRUE(held_a && held_b) << "the same name in two installations is two locks";
  EXPECT_EQ(a->locks().size(), 1u);
  EXPECT_EQ(b->locks().size(), 1u);
}

TEST_P(Migrations, CustomSchema) {
  auto custom = fmt::format("dblock_s{}", getpid());
  if (sqlite_ || mysql_) {
    EXPECT_THROW((void)dblock::Store::open(dsn(prefix_, "schema=" + custom)), dblock::InvalidArgument)
        << "SQLite has no schemas and MySQL's schema is the URI's database: refused, not ignored";
    return;
  }
  auto store = dblock::Store::open(dsn(prefix_, "schema=" + custom));
  dblock::migrate(*store);
  EXPECT_EQ(count(fmt::format("SELECT count(*) FROM pg_tables WHERE schemaname = '{}' AND tablename = '{}locks'",
                              custom, prefix_)),
            1);
  EXPECT_FALSE(admin_->table_exists(prefix_ + "locks")) << "nothing in public";
  dblock::LockManager locks(store);
  EXPECT_TRUE(locks.try_acquire("in-custom-schema"));
}

TEST_P(Migrations, TenConcurrentMigrateUpProcessesApplyEachVersionOnce) {
  auto target = dsn(prefix_);
  std::vector<dblock::test::ChildProcess> children;
  for (int i = 0; i < 10; ++i)
    children.emplace_back(std::vector<std::string>{DBLOCK_CLI_PATH, "--dsn", target, "migrate", "up"});
  for (auto& child : children) {
    auto outcome = child.finish();
    EXPECT_EQ(outcome.exit_code, 0) << "every concurrent run succeeds: " << outcome.output;
  }
  EXPECT_EQ(count("SELECT count(*) FROM " + history()), dblock::latest_schema_version());
}

TEST_P(Migrations, EditedMigrationIsDetectedAsDrift) {
  auto store = dblock::Store::open(dsn(prefix_));
  dblock::Migrator migrator(store);
  migrator.up();
  admin_->exec("UPDATE " + history() + " SET checksum = 'edited' WHERE version = 1");
  auto expected = all(dblock::MigrationState::applied);
  expected.front() = dblock::MigrationState::drifted;
  EXPECT_EQ(states(migrator), expected);
  EXPECT_THROW(migrator.verify(), dblock::SchemaError);
  EXPECT_THROW(migrator.up(), dblock::SchemaError);
  auto verified = dblock::test::run_command({DBLOCK_CLI_PATH, "--dsn", dsn(prefix_), "migrate", "verify"});
  EXPECT_EQ(verified.exit_code, 78) << verified.output;
}

TEST_P(Migrations, DatabaseNewerThanTheBuildIsRefused) {
  auto store = dblock::Store::open(dsn(prefix_));
  dblock::Migrator migrator(store);
  migrator.up();
  admin_->exec("INSERT INTO " + history() +
               " (version, name, checksum, applied_by, execution_ms, success) VALUES (999, 'future', 'x', 'test', 0, " +
               (sqlite_ ? "1" : "true") + ")");
  EXPECT_EQ(migrator.status().back().state, dblock::MigrationState::unknown_newer);
  EXPECT_THROW(migrator.up(), dblock::SchemaError);
  auto fresh = dblock::Store::open(dsn(prefix_));
  try {
    dblock::LockManager refused(fresh);
    FAIL() << "a newer schema must be refused";
  } catch (const dblock::SchemaError& e) {
    EXPECT_EQ(e.reason(), dblock::SchemaError::Reason::newer) << e.what();
  }
}

TEST_P(Migrations, FailingMigrationLeavesNothingAndRepairClearsFailedRecords) {
  auto store = dblock::Store::open(dsn(prefix_));
  auto& backend = dblock::detail::StoreParts::backend(*store).migrations().get();
  {
    auto session = backend.open_migration();
    ASSERT_TRUE(session->try_lock());
    session->history();
    dblock::detail::MigrationFile broken{2, "broken", "0", "CREATE TABLE {prefix}half (x integer);\nSELEKT 1;"};
    try {
      dblock::detail::apply_migration(*session, backend.migration_dialect(), broken, "test");
      FAIL() << "a broken migration must fail";
    } catch (const dblock::DatabaseError& e) {
      EXPECT_NE(std::string(e.what()).find("0002_broken"), std::string::npos) << e.what();
      if (mysql_) {
        EXPECT_NE(std::string(e.what()).find("dblock migrate up"), std::string::npos) << e.what();
      }
    }
    session->finish();
  }
  dblock::Migrator migrator(store);
  if (mysql_) {
    // MySQL commits DDL statement by statement: the first statement stays, and the migration is
    // recorded as failed. It is not a shipped file, so `up` cannot complete it: `repair` clears it.
    EXPECT_TRUE(admin_->table_exists(prefix_ + "half")) << "MySQL cannot roll back DDL";
    EXPECT_EQ(count("SELECT count(*) FROM " + history() + " WHERE version = 2 AND NOT success"), 1);
    EXPECT_EQ(migrator.status().at(1).state, dblock::MigrationState::failed);
    EXPECT_THROW(migrator.up(), dblock::SchemaError);
    EXPECT_EQ(migrator.repair(), std::vector{2});
  } else {
    EXPECT_FALSE(admin_->table_exists(prefix_ + "half")) << "the failed migration's first statement was rolled back";
  }
  EXPECT_EQ(count("SELECT count(*) FROM " + history()), 0) << "nothing recorded as applied";

  // A failed record (as non-transactional DDL leaves behind) blocks `up` until `repair`.
  admin_->exec("INSERT INTO " + history() +
               " (version, name, checksum, applied_by, execution_ms, success) VALUES (1, 'create_locks', 'x', 'test', "
               "0, " +
               (sqlite_ ? "0" : "false") + ")");
  auto expected = all(dblock::MigrationState::pending);
  expected.front() = dblock::MigrationState::failed;
  EXPECT_EQ(states(migrator), expected);
  try {
    migrator.up();
    FAIL() << "up must refuse a failed record";
  } catch (const dblock::SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("dblock migrate repair"), std::string::npos) << e.what();
  }
  EXPECT_EQ(migrator.repair(), std::vector{1});
  EXPECT_EQ(migrator.up().applied, all_versions());
  EXPECT_NO_THROW(migrator.verify());
}

/// Only MySQL's DDL commits statement by statement.
class MySqlMigrations : public Migrations {};

/// The objects dblock's migrations create under `p` (kept here by hand, not read from the code
/// under test), each with SQL that makes a foreign object of that name: the kind differs where
/// that is possible, and tables have another shape.
std::vector<std::pair<std::string, std::string>> foreign_objects(const std::string& dialect, const std::string& s,
                                                                 const std::string& p) {
  if (dialect == "postgresql")
    return {
        {p + "locks", fmt::format(R"(CREATE TABLE "{}"."{}locks" (id integer))", s, p)},
        {p + "token_seq", fmt::format(R"(CREATE TABLE "{}"."{}token_seq" (id integer))", s, p)},
        {p + "schema_history", fmt::format(R"(CREATE TABLE "{}"."{}schema_history" (id integer))", s, p)},
        {p + "locks_expires_at", fmt::format(R"(CREATE TABLE "{0}"."{1}other" (x integer);
CREATE INDEX "{1}locks_expires_at" ON "{0}"."{1}other" (x))",
                                             s, p)},
        {p + "locks_pkey", fmt::format(R"(CREATE SEQUENCE "{}"."{}locks_pkey")", s, p)},
        {p + "acquire",
         fmt::format(R"(CREATE FUNCTION "{}"."{}acquire"(x integer) RETURNS integer LANGUAGE sql AS 'SELECT 1')", s,
                     p)},
        {p + "renew", fmt::format(R"(CREATE VIEW "{}"."{}renew" AS SELECT 1 AS x)", s, p)},
        {p + "advisory_lock",
         fmt::format(R"(CREATE FUNCTION "{}"."{}advisory_lock"() RETURNS integer LANGUAGE sql AS 'SELECT 1')", s, p)},
        {p + "acquire_held", fmt::format(R"(CREATE TABLE "{}"."{}acquire_held" (x integer))", s, p)},
        {p + "renew_held",
         fmt::format(R"(CREATE FUNCTION "{}"."{}renew_held"(x text) RETURNS integer LANGUAGE sql AS 'SELECT 1')", s,
                     p)}};
  if (dialect == "mysql")
    return {{p + "locks", fmt::format("CREATE TABLE `{}locks` (id INT PRIMARY KEY, note TEXT)", p)},
            {p + "token_seq", fmt::format("CREATE TABLE `{}token_seq` (id INT)", p)},
            {p + "schema_history", fmt::format("CREATE TABLE `{}schema_history` (id INT)", p)},
            {p + "acquire", fmt::format("CREATE FUNCTION `{}acquire`(x INT) RETURNS INT RETURN x", p)},
            {p + "release", fmt::format("CREATE PROCEDURE `{}release`() SELECT 1", p)},
            {p + "acquire_held", fmt::format("CREATE VIEW `{}acquire_held` AS SELECT 1 AS x", p)}};
  return {{p + "locks", fmt::format(R"(CREATE TABLE "{}locks" (id INTEGER))", p)},
          {p + "token_counter", fmt::format(R"(CREATE VIEW "{}token_counter" AS SELECT 1 AS x)", p)},
          {p + "schema_history", fmt::format(R"(CREATE TABLE "{}schema_history" (id INTEGER))", p)},
          {p + "locks_expires_at", fmt::format(R"(CREATE TABLE "{0}other" (x INTEGER);
CREATE INDEX "{0}locks_expires_at" ON "{0}other" (x))",
                                               p)},
          {p + "locks_token_insert", fmt::format(R"(CREATE TABLE "{0}other" (x INTEGER);
CREATE TRIGGER "{0}locks_token_insert" AFTER INSERT ON "{0}other" BEGIN SELECT 1; END)",
                                                 p)}};
}

TEST_P(Migrations, AForeignObjectUnderAnyOfDblocksNamesIsRefusedAndNothingChanges) {
  std::string dialect = GetParam().dialect;
  for (std::size_t i = 0; i < foreign_objects(dialect, schema(), "").size(); ++i) {
    auto prefix = dblock::test::unique_prefix();
    auto [name, create] = foreign_objects(dialect, schema(), prefix).at(i);
    SCOPED_TRACE(name);
    for (std::size_t from = 0, to; from < create.size(); from = to + 2) {  // one statement at a time
      to = create.find(";\n", from);
      if (to == std::string::npos) to = create.size();
      admin_->exec(create.substr(from, to - from));
    }
    auto before = catalog(prefix);
    try {
      dblock::Migrator(dblock::Store::open(dsn(prefix)), 10s).up();
      ADD_FAILURE() << "up must refuse " << name;
    } catch (const dblock::SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Nothing was changed"), std::string::npos) << e.what();
    }
    EXPECT_EQ(catalog(prefix), before) << "the database is as it was";
  }
}

TEST_P(Migrations, WithAnEmptyPrefixAForeignLocksTableIsRefused) {
  // An empty prefix puts dblock's objects under the plainest names: locks, acquire, schema_history.
  std::string dialect = GetParam().dialect;
  auto where = dialect == "postgresql" ? fmt::format("e{}", getpid()) : schema();
  if (dialect == "postgresql") admin_->exec(fmt::format(R"(CREATE SCHEMA "{}")", where));
  auto [name, create] = foreign_objects(dialect, where, "").front();
  if (dialect == "mysql") admin_->exec("DROP TABLE IF EXISTS `locks`");
  admin_->exec(create);
  admin_->exec(dialect == "mysql" ? "INSERT INTO `locks` VALUES (1, 'the application''s row')"
                                  : fmt::format(R"(INSERT INTO "{}"."locks" VALUES (1))", where));
  auto extra = dialect == "postgresql" ? "schema=" + where : std::string();
  EXPECT_THROW(dblock::Migrator(dblock::Store::open(dsn("", extra)), 10s).up(), dblock::SchemaError);
  auto qualified = dialect == "mysql" ? std::string("`locks`") : fmt::format(R"("{}"."locks")", where);
  EXPECT_EQ(count("SELECT count(*) FROM " + qualified), 1) << "the application's row is untouched";
  if (dialect == "postgresql")
    EXPECT_EQ(count(fmt::format("SELECT count(*) FROM information_schema.tables WHERE table_schema = '{}'", where)), 1)
        << "nothing created beside the application's table: no history";
  else
    EXPECT_FALSE(admin_->table_exists("schema_history")) << "nothing recorded";
  if (dialect == "mysql") admin_->exec("DROP TABLE `locks`");
  if (dialect == "postgresql") admin_->exec(fmt::format(R"(DROP SCHEMA "{}" CASCADE)", where));
}

TEST_P(Migrations, VerifyNamesADroppedIndexAReplacedFunctionAChangedColumnAndAMovedIndex) {
  auto store = dblock::Store::open(dsn(prefix_));
  dblock::Migrator migrator(store, 10s);
  migrator.up();
  EXPECT_NO_THROW(migrator.verify());
  std::string replaced;
  std::string changed_column;  // a column whose type, nullability or collation was changed by hand
  if (sqlite_) {
    admin_->exec(fmt::format(R"(DROP INDEX "{}holders_expires_at")", prefix_));
    admin_->exec(fmt::format(R"(CREATE INDEX "{0}holders_expires_at" ON "{0}holders" (owner))", prefix_));
    replaced = prefix_ + "locks_token_insert";
    admin_->exec(fmt::format(R"(DROP INDEX "{}locks_expires_at")", prefix_));
    admin_->exec(fmt::format(R"(DROP TRIGGER "{0}locks_token_insert")", prefix_));
    admin_->exec(fmt::format(R"(CREATE TRIGGER "{0}locks_token_insert" AFTER INSERT ON "{0}locks" BEGIN SELECT 1; END)",
                             prefix_));
  } else if (mysql_) {
    // Names compared without case: 'a' and 'A' would be one lock.
    admin_->exec(
        fmt::format("ALTER TABLE `{}locks` MODIFY name VARCHAR(255) CHARACTER SET utf8mb4 "
                    "COLLATE utf8mb4_general_ci NOT NULL",
                    prefix_));
    changed_column =
        "column 'name' of table '" + prefix_ + "locks' is varchar(255) not null collate utf8mb4_general_ci";
    admin_->exec(
        fmt::format("ALTER TABLE `{0}holders` DROP INDEX `{0}holders_expires_at`, "
                    "ADD INDEX `{0}holders_expires_at` (owner)",
                    prefix_));
    replaced = prefix_ + "release";
    admin_->exec(fmt::format("ALTER TABLE `{0}locks` DROP INDEX `{0}locks_expires_at`", prefix_));
    admin_->exec(fmt::format("DROP FUNCTION `{}release`", prefix_));
    admin_->exec(
        fmt::format("CREATE FUNCTION `{}release`(a VARCHAR(255), b VARCHAR(255), c BIGINT) RETURNS BIGINT "
                    "RETURN 0",
                    prefix_));
  } else {
    admin_->exec(fmt::format(R"(ALTER TABLE "{}"."{}locks" ALTER COLUMN owner DROP NOT NULL)", schema(), prefix_));
    changed_column = "column 'owner' of table '" + prefix_ + "locks' is text, dblock's migrations create text not null";
    admin_->exec(fmt::format(R"(DROP INDEX "{}"."{}holders_expires_at")", schema(), prefix_));
    admin_->exec(
        fmt::format(R"(CREATE INDEX "{1}holders_expires_at" ON "{0}"."{1}holders" (owner))", schema(), prefix_));
    replaced = prefix_ + "renew_held";
    admin_->exec(fmt::format(R"(DROP INDEX "{}"."{}locks_expires_at")", schema(), prefix_));
    admin_->exec(
        fmt::format(R"(CREATE OR REPLACE FUNCTION "{}"."{}renew_held"(p_names text[], p_owners text[], )"
                    R"(p_tokens bigint[], p_ttls_ms bigint[]) RETURNS SETOF bigint LANGUAGE sql AS 'SELECT 0::bigint')",
                    schema(), prefix_));
  }
  try {
    migrator.verify();
    FAIL() << "verify must see the catalog's drift";
  } catch (const dblock::SchemaError& e) {
    EXPECT_NE(
        std::string(e.what()).find("index '" + prefix_ + "locks_expires_at' on '" + prefix_ + "locks' is missing"),
        std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("'" + replaced + "' is not the one"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("index '" + prefix_ + "holders_expires_at' on '" + prefix_ +
                                         "holders' is on (owner), dblock's migrations create it on (expires_at)"),
              std::string::npos)
        << e.what();
    if (!changed_column.empty()) {  // SQLite cannot change a column in place
      EXPECT_NE(std::string(e.what()).find(changed_column), std::string::npos) << e.what();
    }
  }
}

TEST_P(MySqlMigrations, AnyReplicaCompletesAMigrationBrokenOffPartWay) {
  dblock::Migrator first(dblock::Store::open(dsn(prefix_)), 10s);
  first.up(2);
  // 0003 broken off after its first statement: its record says started, its first function exists
  // (here with a body of its own, so that completing it must replace it).
  auto checksum = first.status().at(2).shipped_checksum;
  admin_->exec(
      fmt::format("INSERT INTO {} (version, name, checksum, applied_by, execution_ms, success) "
                  "VALUES (3, 'lease_safety', '{}', 'killed replica', 0, FALSE)",
                  history(), checksum));
  admin_->exec(
      fmt::format("CREATE FUNCTION `{}acquire_held`(a VARCHAR(255), b VARCHAR(255), c BIGINT, d BIGINT) "
                  "RETURNS VARCHAR(64) RETURN NULL",
                  prefix_));
  dblock::Migrator replica(dblock::Store::open(dsn(prefix_)), 10s);
  std::vector<int> from_3;  // the broken-off migration, then the later ones
  for (int version = 3; version <= dblock::latest_schema_version(); ++version) from_3.push_back(version);
  EXPECT_EQ(replica.up().applied, from_3);
  EXPECT_EQ(states(replica), all(dblock::MigrationState::applied));
  EXPECT_NO_THROW(replica.verify()) << "the half-made function was replaced by the shipped one";
  dblock::LockManager locks(dblock::Store::open(dsn(prefix_)));
  EXPECT_TRUE(locks.try_acquire("after-resume"));

  // `repair` completes as well, rather than forgetting a record whose objects exist.
  admin_->exec(fmt::format("UPDATE {} SET success = FALSE WHERE version = 3", history()));
  admin_->exec(fmt::format("DROP FUNCTION `{}acquire`", prefix_));
  EXPECT_EQ(replica.repair(), std::vector{3});
  EXPECT_EQ(states(replica), all(dblock::MigrationState::applied));
  EXPECT_NO_THROW(replica.verify());
}

TEST_P(MySqlMigrations, AMigratingUserMissingAPrivilegeIsRefusedBeforeAnythingIsCreated) {
  // A migrating user without CREATE ROUTINE: before, 0001 created its sequence and table, then
  // failed at its first function and left a failed record (completed by the next `up`, which the
  // test above covers). Now `up` names the missing rights first and creates nothing.
  auto user = fmt::format("dblock_limited_{}", getpid());
  admin_->exec(fmt::format("CREATE USER IF NOT EXISTS '{}'@'%' IDENTIFIED BY 'pw'", user));
  admin_->exec(
      fmt::format("GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER ON dblock.* TO '{}'@'%'", user));
  auto limited = server_dsn_;
  limited.replace(limited.find("://") + 3, limited.find('@') - limited.find("://") - 3, user + ":pw");
  auto store = dblock::Store::open(installation_->dsn_on(limited));
  dblock::Migrator migrator(store);
  EXPECT_THROW(migrator.up(), dblock::PermissionDenied);
  EXPECT_FALSE(admin_->table_exists(prefix_ + "locks"));
  EXPECT_FALSE(admin_->table_exists(prefix_ + "schema_history"));
  EXPECT_EQ(migrator.status().front().state, dblock::MigrationState::pending);

  admin_->exec(fmt::format("GRANT CREATE ROUTINE, ALTER ROUTINE, EXECUTE ON dblock.* TO '{}'@'%'", user));
  // Sessions see new database privileges only once they connect: a fresh store, as another
  // replica would be.
  auto granted = dblock::Store::open(installation_->dsn_on(limited));
  dblock::Migrator again(granted);
  EXPECT_EQ(again.up().applied, all_versions());
  EXPECT_NO_THROW(again.verify());
  dblock::LockManager locks(granted);
  EXPECT_TRUE(locks.try_acquire("after-grant"));
  admin_->exec(fmt::format("DROP USER '{}'@'%'", user));
}

TEST_P(Migrations, SqlScriptAppliedByHandEqualsUp) {
  auto by_hand = prefix_;
  auto by_up = dblock::test::unique_prefix();
  auto script = dblock::Migrator::sql(dsn(by_hand));
  EXPECT_EQ(script.find("{prefix}"), std::string::npos);
  auto path = fmt::format("/tmp/dblock-script-{}.sql", getpid());
  std::ofstream(path) << script;
  std::vector<std::string> command;
  std::optional<std::string> input;  // the script on stdin, for the clients that read it there
  if (sqlite_) {
    command = {"sqlite3", "-bail", server_dsn_.substr(std::string("sqlite://").size())};
    input = script;
  } else if (mysql_) {
    // mysql://dblock:PW@127.0.0.1:PORT/dblock, as tools/testdb.sh prints it
    auto credentials = server_dsn_.substr(8, server_dsn_.find('@') - 8);
    command = {"mariadb",
               "--no-defaults",
               "-h127.0.0.1",
               fmt::format("-P{}", dblock::test::dsn_port(server_dsn_)),
               "-u" + credentials.substr(0, credentials.find(':')),
               "-p" + credentials.substr(credentials.find(':') + 1),
               "dblock"};
    input = script;
  } else {
    command = {"psql", server_dsn_, "-v", "ON_ERROR_STOP=1", "-X", "-q", "-f", path};
  }
  auto applied = dblock::test::run_command(command, {.input = input});
  std::remove(path.c_str());
  ASSERT_EQ(applied.exit_code, 0) << command.front() << ": " << applied.output;

  dblock::migrate(*dblock::Store::open(dsn(by_up)));
  auto hand_catalog = catalog(by_hand);
  EXPECT_FALSE(hand_catalog.empty());
  EXPECT_EQ(hand_catalog, catalog(by_up));

  auto store = dblock::Store::open(dsn(by_hand));
  dblock::Migrator migrator(store);
  EXPECT_EQ(states(migrator), all(dblock::MigrationState::applied)) << "the history records are recognised";
  EXPECT_TRUE(migrator.up().applied.empty());
  dblock::LockManager locks(store);
  EXPECT_TRUE(locks.try_acquire("hand-migrated"));
}

INSTANTIATE_TEST_SUITE_P(Backends, Migrations,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable, dblock::test::kSqlite})),
                         [](const auto& info) { return std::string(info.param.label); });
INSTANTIATE_TEST_SUITE_P(Backends, RoleMigrations,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable})),
                         [](const auto& info) { return std::string(info.param.label); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MySqlMigrations);  // a build without MySQL
INSTANTIATE_TEST_SUITE_P(Backends, MySqlMigrations,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kMysqlTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
