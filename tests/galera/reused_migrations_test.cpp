// A migration set that reuses another set's identical file (CMakeLists.txt: galera/NNNN=mysql/NNNN,
// cmake/EmbedMigrations.cmake) must leave databases migrated with the set's own, repeated copy of
// that file as they were: their history (version, name, checksum) reads as applied and their objects
// verify against the current build. Here a database is migrated with the galera files as released
// before the reuse, then checked by the current build.

#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "base/embedded_migrations.hpp"
#include "core/store_parts.hpp"
#include "migrate/migration_engine.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

/// migrations/galera/0005_single_write_acquire.sql as released (commit 2a4ad7b^), before galera
/// reused mysql's file, and the checksum databases recorded for it
/// (tests/unit/released_migrations_test.cpp).
constexpr std::string_view kOldGalera0005 =
    "-- dblock schema version 5: PostgreSQL's acquisition writes its row once (migrations/postgres/0005).\n"
    "-- Nothing changes in this dialect; the version exists so that every dialect's schema has one number.\n";
constexpr std::string_view kOldGalera0005Checksum = "e7560dfc3501866f3294458a62dcdbf2a9c02991d6144e2c48ecf5cd3cd05e5b";

/// The galera set as a build before the reuse embedded it: its own copy of 0005, every other file as now
/// (0011 was reused from its first release, so no older copy of it exists).
std::vector<dblock::detail::MigrationFile> old_galera_files() {
  auto files = dblock::detail::migrations_of("galera");
  for (auto& file : files)
    if (file.version == 5) {
      file.sql = kOldGalera0005;
      file.checksum = kOldGalera0005Checksum;
    }
  return files;
}

}  // namespace

TEST(GaleraReusedMigrations, DatabaseMigratedWithTheRepeatedFilesVerifiesWithTheReusedOnes) {
  std::string dsn;
  DBLOCK_REQUIRE_DSN(dsn, "DBLOCK_TEST_GALERA_DSN");
  auto store = dblock::Store::open(dblock::test::with_params(dsn, "prefix=" + dblock::test::unique_prefix()),
                                   {.connect_timeout = 3s, .statement_timeout = 10s});
  auto& backend = dblock::detail::StoreParts::backend(*store).migrations().get();
  ASSERT_EQ(backend.migration_dialect().migration_set(), "galera");
  auto old_files = old_galera_files();
  ASSERT_EQ(static_cast<int>(old_files.size()), dblock::latest_schema_version());
  {
    auto session = backend.open_migration();
    ASSERT_TRUE(session->try_lock());
    ASSERT_TRUE(session->history().empty());
    for (auto& file : old_files)
      dblock::detail::apply_migration(*session, backend.migration_dialect(), file, "released build");
    session->finish();
  }

  dblock::Migrator migrator(store);
  for (auto& status : migrator.status())
    EXPECT_EQ(status.state, dblock::MigrationState::applied)
        << "version " << status.version << " (" << status.name << ") reads as " << dblock::to_string(status.state);
  EXPECT_NO_THROW(migrator.verify());
  auto result = migrator.up();
  EXPECT_TRUE(result.applied.empty()) << "nothing to apply on a database the old files migrated";
  EXPECT_EQ(result.current_version, dblock::latest_schema_version());
  dblock::LockManager manager(store);
  auto lock = manager.try_acquire("reused-migrations");
  EXPECT_TRUE(lock.has_value()) << "the schema the old files left works with the current build";
}
