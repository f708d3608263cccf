#pragma once
// What the migration engine (src/migrate) needs to know of a dialect's SQL text: how migrations are
// filled in and split into statements, the history table, whether DDL is transactional, and how a
// `dblock migrate sql` script is framed; and the dialect's rules for reading its catalog and the
// grants a runtime role needs. Text only: no connection, so `migrate sql` and `migrate grants` work
// offline.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/catalog_object.hpp"
#include "backends/catalog_rules.hpp"
#include "backends/dialect_bound.hpp"

namespace dblock::detail {

struct MigrationFile;

/// How a script for the dialect's own client is laid out around the statements.
struct ScriptFrame {
  std::string header;                      ///< comment lines: what the script is for and how to apply it
  std::string opening;                     ///< raw text before the first statement (e.g. `DELIMITER $$`)
  std::vector<std::string> preamble;       ///< statements before the migrations (lock, schema, history table)
  std::vector<std::string> epilogue;       ///< statements after them (unlock, commit)
  std::string closing;                     ///< raw text after the last statement
  std::string terminator = ";";            ///< what ends a statement for the client
  bool transaction_per_migration = false;  ///< BEGIN/COMMIT around each migration
};

class MigrationDialect : public virtual DialectBound {
 public:
  /// The folder under migrations/ whose files this dialect applies ("postgres", "mysql",
  /// "galera", "sqlite").
  [[nodiscard]] virtual std::string_view migration_set() const noexcept = 0;
  /// A migration's SQL with this store's schema and prefix filled in, as `up` runs it.
  [[nodiscard]] virtual std::string filled(std::string_view migration_sql) const = 0;
  /// The filled migration as the statements a session runs one by one, each without its terminator.
  [[nodiscard]] virtual std::vector<std::string> statements(std::string_view migration_sql) const = 0;
  /// The history table's DDL, as the migration session runs it.
  [[nodiscard]] virtual std::string history_ddl() const = 0;
  /// True where DDL commits by itself (MySQL): a migration is then recorded as started before it
  /// runs, and one broken off part-way is completed by running it again (every statement of the
  /// shipped migrations is safe to run again). Elsewhere each migration is one transaction.
  [[nodiscard]] virtual bool ddl_commits_itself() const noexcept { return false; }
  /// The statement a script records `migration` as applied with (name and checksum are [a-z0-9_]
  /// and hex, safe as literals).
  [[nodiscard]] virtual std::string script_record(const MigrationFile& migration) const = 0;
  [[nodiscard]] virtual ScriptFrame script_frame() const = 0;
  /// How this dialect's catalog names and spells what the migrations create.
  [[nodiscard]] virtual const CatalogRules& catalog_rules() const noexcept = 0;
  /// What `dblock migrate grants --role ROLE` prints: the statements that give a runtime role what it
  /// needs on every one of `objects` (those the migrations create). @throws InvalidArgument for a role
  /// the dialect cannot name.
  [[nodiscard]] virtual std::string runtime_grants(std::span<const CatalogObject> objects,
                                                   std::string_view role) const = 0;
};

/// A whole migration file as one statement, without its final terminator: for dialects whose
/// sessions run several statements in one call (PostgreSQL's simple protocol, SQLite's exec).
[[nodiscard]] inline std::string as_one_statement(std::string text) {
  auto trim = [&] {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r' || text.back() == '\t'))
      text.pop_back();
  };
  trim();
  if (!text.empty() && text.back() == ';') text.pop_back();
  trim();
  return text;
}

}  // namespace dblock::detail
