#pragma once
#include <string>
#include <vector>

namespace dblock::detail {

/// One object dblock's DDL creates, or one the live catalog holds under one of its names.
struct CatalogObject {
  std::string kind;  // table, sequence, index, function, procedure, trigger, view, other
  std::string name;
  std::string table;                      // index, trigger: the table it belongs to
  std::vector<std::string> columns;       // table: its columns, in order; index: the columns it keys on
  std::string definition;                 // function, procedure: its body; trigger: its statement
  bool definition_hidden = false;         // the catalog does not show this role the body (MySQL: not its definer)
  std::vector<std::string> column_types;  // table: per column, as column_type() spells it
  bool adds_columns = false;              // table: `ALTER TABLE ... ADD COLUMN` adds (some of) its columns
};

}  // namespace dblock::detail
