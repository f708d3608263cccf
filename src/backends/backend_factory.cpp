#include "backends/backend_factory.hpp"

#include <fmt/format.h>

#include "backends/mysql/my_backend.hpp"
#include "backends/postgres/pg_backend.hpp"
#include "backends/runtime_grants.hpp"
#include "backends/sqlite/sqlite_backend.hpp"

namespace dblock::detail {

namespace {

[[noreturn]] void not_built(const StoreUri& uri) {
  throw InvalidArgument(fmt::format("DSN '{}': the {} backend is not part of this dblock build yet", uri.redacted,
                                    uri.scheme));
}

}  // namespace

std::vector<std::string> compiled_backends() {
  return {fmt::format("postgresql ({})", postgres_driver_version()), fmt::format("mysql ({})", mysql_driver_version()),
          fmt::format("sqlite ({})", sqlite_driver_version())};
}

std::unique_ptr<Backend> make_backend(const StoreUri& uri, const BackendSettings& settings) {
  if (uri.scheme == "postgresql") return make_postgres_backend(uri, settings);
  if (uri.scheme == "mysql") return make_mysql_backend(uri, settings);
  if (uri.scheme == "sqlite") return make_sqlite_backend(uri, settings.connect_timeout, settings.logger);
  not_built(uri);
}

std::string render_migration_script(const StoreUri& uri, std::span<const MigrationFile> migrations) {
  if (uri.scheme == "postgresql") return render_postgres_migrations(uri, migrations);
  if (uri.scheme == "mysql") return render_mysql_migrations(uri, migrations);
  if (uri.scheme == "sqlite") return render_sqlite_migrations(uri, migrations);
  not_built(uri);
}

std::string render_runtime_grants(const StoreUri& uri, std::span<const MigrationFile> migrations, std::string_view role) {
  if (uri.scheme == "sqlite")
    return "-- SQLite has no roles: whoever may write the database file (and its directory) can use dblock.\n";
  auto objects = objects_created_by(render_migration_script(uri, migrations), uri.scheme);
  if (uri.scheme == "postgresql") return postgres_runtime_grants(uri.schema, uri.prefix, objects, role);
  return mysql_runtime_grants(mysql_database_of(uri), uri.prefix, objects, role);
}

}  // namespace dblock::detail
