#pragma once
// What dblock's DDL creates, read from the text of a (filled) script, and what a database's
// catalog holds under the same names: the two sides `migrate up` (foreign objects) and
// `migrate verify` (drift in the live catalog) compare. The reading follows the rules the files in
// migrations/ keep: every CREATE starts a line, names are quoted, a PostgreSQL body sits between
// $fn$ markers, a MySQL or SQLite stored program ends with a line that is exactly `END;`.

#include <string>
#include <string_view>
#include <vector>

#include "backends/catalog_object.hpp"
#include "backends/catalog_rules.hpp"

namespace dblock::detail {

/// The objects `script` creates, in order, read by a dialect's `rules` (a line `ALTER TABLE name ADD COLUMN
/// [IF NOT EXISTS] column type ...;` as a table whose adds_columns is set). Implicit ones
/// are included where their names are the database's (PostgreSQL's `<table>_pkey`, MySQL's
/// `PRIMARY`).
[[nodiscard]] std::vector<CatalogObject> objects_created_by(std::string_view script, const CatalogRules& rules);

/// A column's type as the catalog of the dialect of `rules` spells it, lower case ("timestamptz" is PostgreSQL's
/// "timestamp with time zone"; MySQL's integer display widths dropped), then " not null" when it
/// may not be NULL, then " collate NAME" when a collation is declared (MySQL) or not the default
/// (PostgreSQL). Both sides of a comparison pass through here.
[[nodiscard]] std::string column_type(const CatalogRules& rules, std::string_view type, bool not_null,
                                      std::string_view collation);

/// A catalog's "<type>[ not null][ collate NAME]" in column_type()'s spelling.
[[nodiscard]] std::string canonical_column_type(const CatalogRules& rules, std::string_view described);

/// Whether a live column (canonical) matches the declared one: a collation counts only where
/// dblock declares one.
[[nodiscard]] bool same_column_type(std::string_view declared, std::string_view live);

/// `objects` with each later definition of a kind and name replacing the earlier one, and columns
/// added later appended to their table.
void merge_objects(std::vector<CatalogObject>& into, const std::vector<CatalogObject>& later);

/// "a,b,c" -> {"a","b","c"} (catalog queries aggregate column lists this way).
[[nodiscard]] std::vector<std::string> split_list(std::string_view joined);

}  // namespace dblock::detail
