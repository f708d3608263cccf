#pragma once
// How a dialect's catalog names and spells what dblock's DDL creates: the rules the shared readers
// (schema_objects, src/migrate/catalog_checks) follow instead of branching on the dialect. Each
// dialect implements them in its <p>_migration.cpp; MigrationDialect::catalog_rules() hands them out.

#include <optional>
#include <string>
#include <string_view>

#include "backends/catalog_object.hpp"

namespace dblock::detail {

class CatalogRules {
 public:
  virtual ~CatalogRules() = default;
  /// Whether two catalog entries of one kind name the same object (MySQL: routine names fold case).
  [[nodiscard]] virtual bool same_name(const CatalogObject& a, const CatalogObject& b) const {
    return a.name == b.name;
  }
  /// Whether a live object under `live` takes the name dblock would create as `planned` (MySQL:
  /// table names fold case where the file system does, so a name differing in case counts).
  [[nodiscard]] virtual bool takes_name(std::string_view planned, std::string_view live) const {
    return planned == live;
  }
  /// True where index names are the table's own (MySQL): they cannot clash with anything else.
  [[nodiscard]] virtual bool index_names_are_per_table() const noexcept { return false; }
  /// False where a primary key's columns may be NULL (SQLite's rowid tables).
  [[nodiscard]] virtual bool primary_key_implies_not_null() const noexcept { return true; }
  /// The name of the index a primary key creates by itself, where the catalog lists it.
  [[nodiscard]] virtual std::optional<std::string> primary_key_index(std::string_view /*table*/) const {
    return std::nullopt;
  }
  /// A function's or procedure's body from the text starting at its CREATE: by default from the line
  /// `BEGIN` up to the line that is exactly `END;` (without the ';').
  [[nodiscard]] virtual std::string routine_body(std::string_view from_create) const {
    auto end = from_create.find("\nEND;");
    auto program = end == std::string_view::npos ? from_create : from_create.substr(0, end + 4);
    auto begin = program.find("\nBEGIN");
    return begin == std::string_view::npos ? std::string() : std::string(program.substr(begin + 1));
  }
  /// A lower-case type (base name, then its parenthesised size or "") as the catalog spells it
  /// (aliases resolved, MySQL's integer display widths dropped).
  [[nodiscard]] virtual std::string type_name(std::string base, std::string size) const { return base + size; }
  /// Whether a column's collation is the one it would have anyway, and so not shown (PostgreSQL's "default").
  [[nodiscard]] virtual bool default_collation(std::string_view /*collation*/) const noexcept { return false; }
};

}  // namespace dblock::detail
