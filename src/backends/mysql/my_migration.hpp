#pragma once
// MySQL/MariaDB's migration dialect: the migration session under GET_LOCK, and the script
// `dblock migrate sql` prints.

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backends/migration_backend.hpp"
#include "backends/mysql/my_connection.hpp"
#include "backends/mysql/my_sql.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// The migration lock's name: '#' keeps it apart from every lock name (those follow ':').
[[nodiscard]] std::string migration_lock_name(const StoreUri& uri, std::string_view database);

/// A migration session on `connection` whose lock is GET_LOCK(`lock_name`).
[[nodiscard]] std::unique_ptr<MigrationSession> make_my_migration_session(std::unique_ptr<MyConnection> connection,
                                                                          const MySql& sql, std::string lock_name,
                                                                          std::string prefix);

/// The SQL `up` runs for `migrations` on an empty database, history records included, as a script
/// for the `mysql`/`mariadb` client.
[[nodiscard]] std::string render_mysql_migrations(const StoreUri& uri, std::span<const MigrationFile> migrations);

}  // namespace dblock::detail
