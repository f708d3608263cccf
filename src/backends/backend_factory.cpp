#include "backends/backend_factory.hpp"

#include <fmt/format.h>

#include "backends/sqlite/sqlite_backend.hpp"
#include "backends/sqlite/sqlite_migration.hpp"
#if DBLOCK_WITH_MYSQL
#include "backends/mysql/my_backend.hpp"
#include "backends/mysql/my_migration.hpp"
#endif
#if DBLOCK_WITH_POSTGRES
#include "backends/postgres/pg_backend.hpp"
#include "backends/postgres/pg_migration.hpp"
#endif

// The backends a build holds follow its CMake options (DBLOCK_WITH_POSTGRES, DBLOCK_WITH_MYSQL);
// SQLite, the embedded default, is always there. This file is the only one that knows which.

namespace dblock::detail {

namespace {

[[noreturn]] void not_built(const StoreUri& uri) {
  throw InvalidArgument(
      fmt::format("DSN '{}': the {} backend is not part of this dblock build (configure with "
                  "-DDBLOCK_WITH_{}=ON)",
                  uri.redacted, to_string(uri.dialect), uri.dialect == Dialect::mysql ? "MYSQL" : "POSTGRES"));
}

}  // namespace

std::vector<std::string> compiled_backends() {
  std::vector<std::string> built;
#if DBLOCK_WITH_POSTGRES
  built.push_back(fmt::format("postgresql ({})", postgres_driver_version()));
#endif
#if DBLOCK_WITH_MYSQL
  built.push_back(fmt::format("mysql ({})", mysql_driver_version()));
#endif
  built.push_back(fmt::format("sqlite ({})", sqlite_driver_version()));
  return built;
}

std::unique_ptr<Backend> make_backend(const StoreUri& uri, const BackendSettings& settings) {
  if ((settings.clock || settings.hook) && uri.dialect != Dialect::sqlite)
    throw InvalidArgument("a test clock and statement faults need an SQLite store (dblock::testing)");
  switch (uri.dialect) {
#if DBLOCK_WITH_POSTGRES
    case Dialect::postgresql:
      return make_postgres_backend(uri, settings);
#endif
#if DBLOCK_WITH_MYSQL
    case Dialect::mysql:
      return make_mysql_backend(uri, settings);
#endif
    case Dialect::sqlite:
      return make_sqlite_backend(uri, settings);
    default:
      not_built(uri);
  }
}

std::unique_ptr<MigrationDialect> make_migration_dialect(const StoreUri& uri) {
  switch (uri.dialect) {
#if DBLOCK_WITH_POSTGRES
    case Dialect::postgresql:
      return std::make_unique<PgMigrationDialect>(uri);
#endif
#if DBLOCK_WITH_MYSQL
    case Dialect::mysql:
      return std::make_unique<MyMigrationDialect>(mysql_database_of(uri), uri.prefix, uri.galera);
#endif
    case Dialect::sqlite:
      return std::make_unique<SqliteMigrationDialect>(uri.prefix);
    default:
      not_built(uri);
  }
}

}  // namespace dblock::detail
