#include "backends/schema_objects.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

#include "base/ascii_text.hpp"

namespace dblock::detail {

namespace {

/// The last part of `"schema"."name"` or `` `name` ``, unquoted.
std::string unqualified(std::string_view name) {
  auto dot = name.rfind('.');
  if (dot != std::string_view::npos && dot + 1 < name.size() && (name[dot + 1] == '"' || name[dot + 1] == '`'))
    name = name.substr(dot + 1);
  if (name.size() >= 2 && (name.front() == '"' || name.front() == '`')) name = name.substr(1, name.size() - 2);
  return std::string(name);
}

/// The first word of a column or constraint line, unquoted.
std::string first_word(std::string_view item) {
  item = trim_whitespace(item);
  if (!item.empty() && (item.front() == '"' || item.front() == '`')) {
    auto end = item.find(item.front(), 1);
    return std::string(item.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1));
  }
  auto end = std::find_if(item.begin(), item.end(),
                          [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0 || c == '('; });
  return std::string(item.begin(), end);
}

/// The text between the '(' at `open` and its matching ')'.
std::string_view parenthesised(std::string_view text, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && --depth == 0) return text.substr(open + 1, i - open - 1);
  }
  return {};
}

std::vector<std::string_view> top_level_items(std::string_view list) {
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '(') ++depth;
    if (list[i] == ')') --depth;
    if (list[i] == ',' && depth == 0) {
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  items.push_back(list.substr(start));
  return items;
}

/// The words of a declaration, a parenthesised group kept with the word before it ("VARCHAR(255)").
std::vector<std::string_view> words_of(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) != 0) ++i;
    auto start = i;
    int depth = 0;
    while (i < text.size() && (depth > 0 || std::isspace(static_cast<unsigned char>(text[i])) == 0)) {
      if (text[i] == '(') ++depth;
      if (text[i] == ')') --depth;
      ++i;
    }
    if (i > start) words.push_back(text.substr(start, i - start));
  }
  return words;
}

/// The comma-separated column names inside the first parentheses of `text`, unquoted.
std::vector<std::string> key_columns(std::string_view text) {
  std::vector<std::string> columns;
  auto open = text.find('(');
  if (open == std::string_view::npos) return columns;
  for (auto item : top_level_items(parenthesised(text, open))) columns.push_back(first_word(item));
  return columns;
}

/// A column line: its type (the words before the first constraint word), nullability and collation.
std::string declared_column_type(std::string_view item, const CatalogRules& rules, bool in_primary_key) {
  static const std::vector<std::string> constraint_words{"NOT",        "NULL",      "PRIMARY",    "CHECK",
                                                         "COLLATE",    "CHARACTER", "DEFAULT",    "UNIQUE",
                                                         "REFERENCES", "GENERATED", "CONSTRAINT", "AUTO_INCREMENT"};
  auto words = words_of(trim_whitespace(item));
  std::string type;
  std::size_t i = 1;  // words[0] is the name
  for (; i < words.size(); ++i) {
    auto word = ascii_upper(words[i]);
    if (std::find(constraint_words.begin(), constraint_words.end(), word.substr(0, word.find('('))) !=
        constraint_words.end())
      break;
    // Appended, not `"…" + std::string(…)`: GCC 12 at -O3 reports a false -Wrestrict on the latter.
    if (!type.empty()) type += ' ';
    type += words[i];
  }
  bool not_null = false;
  std::string collation;
  for (; i < words.size(); ++i) {
    auto word = ascii_upper(words[i]);
    if (word == "NOT" && i + 1 < words.size() && ascii_upper(words[i + 1]) == "NULL") not_null = true;
    // A primary key's columns are NOT NULL, except in SQLite's rowid tables; dblock's SQLite files say NOT NULL.
    if (word == "PRIMARY" && rules.primary_key_implies_not_null()) not_null = true;
    if (word == "COLLATE" && i + 1 < words.size()) collation = first_word(words[i + 1]);
  }
  return column_type(rules, type, not_null || (in_primary_key && rules.primary_key_implies_not_null()), collation);
}

void read_table(std::string_view statement, const CatalogRules& rules, CatalogObject table,
                std::vector<CatalogObject>& out) {
  auto body = parenthesised(statement, statement.find('('));
  std::vector<CatalogObject> indexes;
  std::vector<std::string> primary_key;
  std::vector<std::string_view> column_items;
  for (auto item : top_level_items(body)) {
    auto word = ascii_upper(first_word(item));
    if (word == "KEY" || word == "INDEX" || word == "UNIQUE") {  // MySQL: KEY `name` (columns)
      auto rest = trim_whitespace(item).substr(word.size());
      indexes.push_back({"index", first_word(rest), table.name, key_columns(rest), {}});
    } else if (word == "PRIMARY") {  // PRIMARY KEY (a, b)
      primary_key = key_columns(item);
    } else if (word != "CONSTRAINT" && word != "CHECK" && word != "FOREIGN" && !word.empty()) {
      column_items.push_back(item);
      if (ascii_upper(item).find("PRIMARY KEY") != std::string::npos) primary_key = {first_word(item)};
    }
  }
  for (auto item : column_items) {
    auto name = first_word(item);
    table.columns.push_back(name);
    bool keyed = std::find(primary_key.begin(), primary_key.end(), name) != primary_key.end();
    table.column_types.push_back(declared_column_type(item, rules, keyed));
  }
  if (auto index = rules.primary_key_index(table.name); index && !primary_key.empty())
    indexes.insert(indexes.begin(), {"index", *index, table.name, primary_key, {}});
  out.push_back(std::move(table));
  out.insert(out.end(), indexes.begin(), indexes.end());
}

/// From `start` to the line that is exactly `END;`, without the ';'.
std::string_view stored_program(std::string_view script, std::size_t start) {
  auto end = script.find("\nEND;", start);
  if (end == std::string_view::npos) return script.substr(start);
  return script.substr(start, end + 4 - start);
}

}  // namespace

std::vector<CatalogObject> objects_created_by(std::string_view script, const CatalogRules& rules) {
  static const std::regex create(
      R"(^CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+)?(TABLE|SEQUENCE|INDEX|FUNCTION|PROCEDURE|TRIGGER|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?((?:"[^"]*"|`[^`]*`)(?:\.(?:"[^"]*"|`[^`]*`))?))",
      std::regex::icase);
  static const std::regex add_column(
      R"(^ALTER\s+TABLE\s+((?:"[^"]*"|`[^`]*`)(?:\.(?:"[^"]*"|`[^`]*`))?)\s+ADD\s+COLUMN\s+(?:IF\s+NOT\s+EXISTS\s+)?([^;]*);)",
      std::regex::icase);
  std::vector<CatalogObject> objects;
  for (std::size_t line = 0; line < script.size();) {
    auto next = script.find('\n', line);
    if (next == std::string_view::npos) next = script.size();
    std::match_results<std::string_view::const_iterator> match;
    auto from = script.begin() + static_cast<std::ptrdiff_t>(line);
    if (std::regex_search(from, script.end(), match, add_column, std::regex_constants::match_continuous)) {
      CatalogObject table{"table", unqualified(match[1].str()), {}, {}, {}};
      table.adds_columns = true;
      auto item = match[2].str();
      table.columns.push_back(first_word(item));
      table.column_types.push_back(declared_column_type(item, rules, false));
      objects.push_back(std::move(table));
    }
    if (std::regex_search(from, script.end(), match, create, std::regex_constants::match_continuous)) {
      auto kind = ascii_upper(match[1].str());
      for (auto& c : kind) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      CatalogObject object{kind, unqualified(match[2].str()), {}, {}, {}};
      auto statement = script.substr(line);
      if (kind == "table") {
        read_table(statement.substr(0, statement.find(";\n")), rules, std::move(object), objects);
      } else {
        if (kind == "index" || kind == "trigger") {
          static const std::regex on(R"(\sON\s+((?:"[^"]*"|`[^`]*`)(?:\.(?:"[^"]*"|`[^`]*`))?))", std::regex::icase);
          std::match_results<std::string_view::const_iterator> table;
          if (std::regex_search(statement.begin(), statement.end(), table, on)) {
            object.table = unqualified(table[1].str());
            if (kind == "index")
              object.columns = key_columns(statement.substr(0, statement.find(";\n"))
                                               .substr(static_cast<std::size_t>(table.position(0) + table.length(0))));
          }
        }
        if (kind == "function" || kind == "procedure") {
          object.definition = rules.routine_body(statement);
        } else if (kind == "trigger") {
          object.definition = std::string(stored_program(script, line));
        }
        objects.push_back(std::move(object));
      }
    }
    line = next + 1;
  }
  return objects;
}

void merge_objects(std::vector<CatalogObject>& into, const std::vector<CatalogObject>& later) {
  for (auto& object : later) {
    auto same = std::find_if(into.begin(), into.end(), [&](const CatalogObject& o) {
      return o.kind == object.kind && o.name == object.name && o.table == object.table;
    });
    if (same != into.end() && object.adds_columns) {
      for (std::size_t i = 0; i < object.columns.size(); ++i)
        if (std::find(same->columns.begin(), same->columns.end(), object.columns[i]) == same->columns.end()) {
          same->columns.push_back(object.columns[i]);
          same->column_types.push_back(object.column_types[i]);
        }
      same->adds_columns = true;  // some of its columns come from ALTER TABLE (MySQL: the ALTER right)
    } else if (same != into.end()) {
      *same = object;
    } else {
      into.push_back(object);
    }
  }
}

std::string column_type(const CatalogRules& rules, std::string_view type, bool not_null, std::string_view collation) {
  auto spelled = ascii_lower(trim_whitespace(type));
  auto open = spelled.find('(');
  auto base = spelled.substr(0, open);
  auto size = open == std::string::npos ? std::string() : spelled.substr(open);
  std::string out = rules.type_name(std::move(base), std::move(size));
  if (not_null) out += " not null";
  if (!collation.empty() && !rules.default_collation(collation)) out += " collate " + std::string(collation);
  return out;
}

std::string canonical_column_type(const CatalogRules& rules, std::string_view described) {
  constexpr std::string_view collate = " collate ";
  constexpr std::string_view not_null = " not null";
  std::string_view collation;
  if (auto at = described.find(collate); at != std::string_view::npos) {
    collation = described.substr(at + collate.size());
    described = described.substr(0, at);
  }
  bool required = described.ends_with(not_null);
  if (required) described.remove_suffix(not_null.size());
  return column_type(rules, described, required, collation);
}

bool same_column_type(std::string_view declared, std::string_view live) {
  if (declared == live) return true;
  if (declared.find(" collate ") != std::string_view::npos) return false;
  return live.substr(0, live.find(" collate ")) == declared;
}

std::vector<std::string> split_list(std::string_view joined) {
  std::vector<std::string> items;
  if (joined.empty()) return items;
  for (auto item : top_level_items(joined)) items.emplace_back(item);
  return items;
}

}  // namespace dblock::detail
