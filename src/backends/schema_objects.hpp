#pragma once
// What dblock's DDL creates, read from the text of a (filled) script, and what a database's
// catalog holds under the same names: the two sides `migrate up` (foreign objects) and
// `migrate verify` (drift in the live catalog) compare. The reading follows the rules the files in
// migrations/ keep: every CREATE starts a line, names are quoted, a PostgreSQL body sits between
// $fn$ markers, a MySQL or SQLite stored program ends with a line that is exactly `END;`.

#include <string>
#include <string_view>
#include <vector>

#include "base/dialect.hpp"

namespace dblock::detail {

struct CatalogObject {
  std::string kind;                  // table, sequence, index, function, procedure, trigger, view, other
  std::string name;
  std::string table;                 // index, trigger: the table it belongs to
  std::vector<std::string> columns;  // table: its columns, in order
  std::string definition;            // function, procedure: its body; trigger: its statement
  bool definition_hidden = false;    // the catalog does not show this role the body (MySQL: not its definer)
};

/// The objects `script` creates, in order, in `dialect`. Implicit ones
/// are included where their names are the database's (PostgreSQL's `<table>_pkey`, MySQL's
/// `PRIMARY`).
[[nodiscard]] std::vector<CatalogObject> objects_created_by(std::string_view script, Dialect dialect);

/// `objects` with each later definition of a kind and name replacing the earlier one.
void merge_objects(std::vector<CatalogObject>& into, const std::vector<CatalogObject>& later);

/// "a,b,c" -> {"a","b","c"} (catalog queries aggregate column lists this way).
[[nodiscard]] std::vector<std::string> split_list(std::string_view joined);

}  // namespace dblock::detail
