#pragma once
// Splits a MySQL migration file into statements, so that each runs on its own (no
// multi-statement mode). The rule the files in migrations/mysql follow: a statement ends with ';'
// at the end of a line, except a stored program (CREATE ... FUNCTION / PROCEDURE / TRIGGER), which
// ends at a line that is exactly 'END;'. Lines starting with '--' outside a statement are dropped.

#include <string>
#include <string_view>
#include <vector>

namespace dblock::detail {

[[nodiscard]] inline std::vector<std::string> split_mysql_script(std::string_view script) {
  auto trim = [](std::string_view text) {
    while (!text.empty() && (text.back() == ' ' || text.back() == '\r' || text.back() == '\t')) text.remove_suffix(1);
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    return text;
  };
  std::vector<std::string> statements;
  std::string current;
  bool stored_program = false;
  while (!script.empty()) {
    auto newline = script.find('\n');
    auto line = script.substr(0, newline);
    script = newline == std::string_view::npos ? std::string_view{} : script.substr(newline + 1);
    auto text = trim(line);
    if (current.empty()) {
      if (text.empty() || text.starts_with("--")) continue;
      stored_program = text.starts_with("CREATE") && (text.find("FUNCTION") != std::string_view::npos ||
                                                      text.find("PROCEDURE") != std::string_view::npos ||
                                                      text.find("TRIGGER") != std::string_view::npos);
    }
    bool ends = stored_program ? text == "END;" : text.ends_with(";");
    if (ends) text.remove_suffix(1);
    current += ends ? std::string(text) : std::string(line) + "\n";
    if (ends) {
      statements.push_back(std::move(current));
      current.clear();
    }
  }
  if (!trim(current).empty()) statements.push_back(std::move(current));  // a last statement without ';'
  return statements;
}

}  // namespace dblock::detail
