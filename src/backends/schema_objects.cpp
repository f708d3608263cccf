#include "backends/schema_objects.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

namespace dblock::detail {

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) text.remove_suffix(1);
  return text;
}

std::string upper(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

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
  item = trim(item);
  if (!item.empty() && (item.front() == '"' || item.front() == '`')) {
    auto end = item.find(item.front(), 1);
    return std::string(item.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1));
  }
  auto end = std::find_if(item.begin(), item.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0 || c == '('; });
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

void read_table(std::string_view statement, Dialect dialect, CatalogObject table,
                std::vector<CatalogObject>& out) {
  auto body = parenthesised(statement, statement.find('('));
  std::vector<CatalogObject> indexes;
  bool primary_key = false;
  for (auto item : top_level_items(body)) {
    auto word = upper(first_word(item));
    if (upper(item).find("PRIMARY KEY") != std::string::npos) primary_key = true;
    if (word == "KEY" || word == "INDEX" || word == "UNIQUE") {  // MySQL: KEY `name` (columns)
      auto rest = trim(item).substr(word.size());
      indexes.push_back({"index", first_word(rest), table.name, {}, {}});
    } else if (word != "PRIMARY" && word != "CONSTRAINT" && word != "CHECK" && word != "FOREIGN" && !word.empty()) {
      table.columns.push_back(first_word(item));
    }
  }
  if (primary_key && dialect == Dialect::postgresql) indexes.insert(indexes.begin(), {"index", table.name + "_pkey", table.name, {}, {}});
  if (primary_key && dialect == Dialect::mysql) indexes.insert(indexes.begin(), {"index", "PRIMARY", table.name, {}, {}});
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

std::vector<CatalogObject> objects_created_by(std::string_view script, Dialect dialect) {
  static const std::regex create(
      R"(^CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+)?(TABLE|SEQUENCE|INDEX|FUNCTION|PROCEDURE|TRIGGER|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?((?:"[^"]*"|`[^`]*`)(?:\.(?:"[^"]*"|`[^`]*`))?))",
      std::regex::icase);
  std::vector<CatalogObject> objects;
  for (std::size_t line = 0; line < script.size();) {
    auto next = script.find('\n', line);
    if (next == std::string_view::npos) next = script.size();
    std::match_results<std::string_view::const_iterator> match;
    auto from = script.begin() + static_cast<std::ptrdiff_t>(line);
    if (std::regex_search(from, script.end(), match, create, std::regex_constants::match_continuous)) {
      auto kind = upper(match[1].str());
      for (auto& c : kind) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      CatalogObject object{kind, unqualified(match[2].str()), {}, {}, {}};
      auto statement = script.substr(line);
      if (kind == "table") {
        read_table(statement.substr(0, statement.find(";\n")), dialect, std::move(object), objects);
      } else {
        if (kind == "index" || kind == "trigger") {
          static const std::regex on(R"(\sON\s+((?:"[^"]*"|`[^`]*`)(?:\.(?:"[^"]*"|`[^`]*`))?))", std::regex::icase);
          std::match_results<std::string_view::const_iterator> table;
          if (std::regex_search(statement.begin(), statement.end(), table, on)) object.table = unqualified(table[1].str());
        }
        if ((kind == "function" || kind == "procedure") && dialect == Dialect::postgresql) {
          auto open = statement.find("$fn$");
          auto close = open == std::string_view::npos ? open : statement.find("$fn$", open + 4);
          if (close != std::string_view::npos) object.definition = std::string(statement.substr(open + 4, close - open - 4));
        } else if (kind == "function" || kind == "procedure") {
          auto program = stored_program(script, line);
          auto begin = program.find("\nBEGIN");
          if (begin != std::string_view::npos) object.definition = std::string(program.substr(begin + 1));
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
    if (same != into.end()) *same = object;
    else into.push_back(object);
  }
}

std::vector<std::string> split_list(std::string_view joined) {
  std::vector<std::string> items;
  if (joined.empty()) return items;
  for (auto item : top_level_items(joined)) items.emplace_back(item);
  return items;
}

}  // namespace dblock::detail
