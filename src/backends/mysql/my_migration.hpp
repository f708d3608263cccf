#pragma once
// MySQL/MariaDB's migration dialect: its migration SQL and script frame, and the steps of a
// migration session under GET_LOCK.

#include <memory>
#include <string>
#include <string_view>

#include "backends/migration_backend.hpp"
#include "backends/mysql/my_sql.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// The migration lock's name: '#' keeps it apart from every lock name (those follow ':').
[[nodiscard]] std::string migration_lock_name(const StoreUri& uri, std::string_view database);

class MyMigrationDialect final : public MigrationDialect {
 public:
  /// `galera`: the database is a Galera cluster, whose migrations (migrations/galera) draw tokens
  /// from per-name counter rows instead of a sequence.
  MyMigrationDialect(std::string database, std::string prefix, bool galera);
  [[nodiscard]] Dialect dialect() const noexcept override { return Dialect::mysql; }
  [[nodiscard]] std::string_view migration_set() const noexcept override { return galera_ ? "galera" : "mysql"; }
  [[nodiscard]] std::string filled(std::string_view migration_sql) const override;
  /// One statement per call: the connection never runs in multi-statement mode (my_script.hpp).
  [[nodiscard]] std::vector<std::string> statements(std::string_view migration_sql) const override;
  [[nodiscard]] std::string history_ddl() const override { return sql_.history_table; }
  [[nodiscard]] bool ddl_commits_itself() const noexcept override { return true; }
  [[nodiscard]] std::string script_record(const MigrationFile& migration) const override;
  [[nodiscard]] ScriptFrame script_frame() const override;
  [[nodiscard]] const CatalogRules& catalog_rules() const noexcept override;
  [[nodiscard]] std::string runtime_grants(std::span<const CatalogObject> objects,
                                           std::string_view role) const override;

 private:
  std::string database_;
  std::string prefix_;
  bool galera_;
  StatementIds ids_;  // its own: of sql_ only texts are used here, none is prepared
  MySql sql_;
};

struct MyDatabase;

/// The migration role on `database` (which it must outlive): the history, the catalog, the rights
/// a run needs, and migration sessions on dedicated connections under GET_LOCK.
[[nodiscard]] std::unique_ptr<MigrationBackend> make_my_migrations(MyDatabase& database);

}  // namespace dblock::detail
