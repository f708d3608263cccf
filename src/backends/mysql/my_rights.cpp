#include "backends/mysql/my_rights.hpp"

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "base/ascii_text.hpp"

namespace dblock::detail {

namespace {

/// One `GRANT privileges ON object TO grantee` row of SHOW GRANTS.
struct GrantRow {
  enum class Level { global, database, object };
  std::vector<std::string> privileges;  // upper case; ALL PRIVILEGES as "ALL"
  Level level = Level::global;
  std::string database;  // Level::database: a pattern (`_` and `%` wildcards, `\` escapes)
  std::string object;    // Level::object: a table or routine
  bool routine = false;
};

/// What SHOW GRANTS says of roles: granted to the account, and those whose own grants it lists.
struct RoleRows {
  std::set<std::string> granted;
  std::set<std::string> listed;
};

/// A backquoted identifier (`` doubled inside) or a bare word, consumed from the front of `text`.
std::optional<std::string> identifier(std::string_view& text) {
  if (text.empty()) return std::nullopt;
  std::string out;
  if (text.front() != '`') {
    auto end = text.find_first_of(". ");
    out = std::string(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end);
    return out;
  }
  for (std::size_t i = 1; i < text.size(); ++i) {
    if (text[i] != '`') {
      out += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == '`') {
      out += '`';
      ++i;
    } else {
      text.remove_prefix(i + 1);
      return out;
    }
  }
  return std::nullopt;
}

/// Privileges separated by commas outside parentheses (column lists: `SELECT (a, b)`).
std::vector<std::string> privileges_of(std::string_view list) {
  std::vector<std::string> out;
  int depth = 0;
  std::string current;
  auto flush = [&] {
    auto privilege = ascii_upper(trim_whitespace(current));
    if (auto paren = privilege.find('('); paren != std::string::npos)
      privilege = std::string(trim_whitespace(privilege.substr(0, paren)));
    if (privilege == "ALL PRIVILEGES") privilege = "ALL";
    if (!privilege.empty()) out.push_back(privilege);
    current.clear();
  };
  for (char c : list) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0)
      flush();
    else
      current += c;
  }
  flush();
  return out;
}

/// The account's grant rows, or nothing for rows of another form (PROXY, role grants).
std::optional<GrantRow> parse_row(std::string_view line, RoleRows& roles) {
  constexpr std::string_view kGrant = "GRANT ";
  if (line.substr(0, kGrant.size()) != kGrant) return std::nullopt;
  line.remove_prefix(kGrant.size());
  auto on = line.find(" ON ");
  auto to = line.rfind(" TO ");
  if (to == std::string_view::npos) return std::nullopt;
  if (on == std::string_view::npos || on > to) {  // GRANT `role` TO `user`@`host`
    auto role_text = line.substr(0, to);
    if (auto role = identifier(role_text)) roles.granted.insert(*role);
    return std::nullopt;
  }
  GrantRow row;
  row.privileges = privileges_of(line.substr(0, on));
  auto object = line.substr(on + 4, to - on - 4);
  for (std::string_view kind : {"FUNCTION ", "PROCEDURE ", "PACKAGE BODY ", "PACKAGE "}) {
    if (object.substr(0, kind.size()) == kind) {
      object.remove_prefix(kind.size());
      row.routine = true;
      break;
    }
  }
  auto grantee = trim_whitespace(line.substr(to + 4));
  if (grantee.find('@') == std::string_view::npos && grantee != "PUBLIC") {  // a role's own grants
    auto role = identifier(grantee);
    if (role) roles.listed.insert(*role);
  }
  auto first = identifier(object);
  if (!first || object.empty() || object.front() != '.') return std::nullopt;
  object.remove_prefix(1);
  auto second = identifier(object);
  if (!second) return std::nullopt;
  if (*first == "*" && *second == "*")
    row.level = GrantRow::Level::global;
  else if (*second == "*")
    row.level = GrantRow::Level::database;
  else
    row.level = GrantRow::Level::object;
  row.database = *first;
  row.object = *second;
  return row;
}

/// MySQL's database-grant pattern: `_` one character, `%` any, `\` escapes the next.
bool pattern_matches(std::string_view pattern, std::string_view name) {
  if (pattern.empty()) return name.empty();
  if (pattern.front() == '%') {
    for (std::size_t skip = 0; skip <= name.size(); ++skip)
      if (pattern_matches(pattern.substr(1), name.substr(skip))) return true;
    return false;
  }
  if (name.empty()) return false;
  if (pattern.front() == '\\' && pattern.size() > 1)
    return pattern[1] == name.front() && pattern_matches(pattern.substr(2), name.substr(1));
  return (pattern.front() == '_' || pattern.front() == name.front()) &&
         pattern_matches(pattern.substr(1), name.substr(1));
}

class Rights {
 public:
  Rights(std::vector<GrantRow> rows, std::string_view database) : rows_(std::move(rows)), database_(database) {}

  [[nodiscard]] bool on_database(std::string_view privilege) const {
    return std::any_of(rows_.begin(), rows_.end(), [&](const GrantRow& row) {
      return gives(row, privilege) &&
             (row.level == GrantRow::Level::global ||
              (row.level == GrantRow::Level::database && pattern_matches(row.database, database_)));
    });
  }
  /// On the database, or on the one table (routine: names compared without case, as MySQL does).
  [[nodiscard]] bool on_object(std::string_view privilege, std::string_view name, bool routine) const {
    return on_database(privilege) || std::any_of(rows_.begin(), rows_.end(), [&](const GrantRow& row) {
             return gives(row, privilege) && row.level == GrantRow::Level::object && row.routine == routine &&
                    row.database == database_ &&
                    (routine ? ascii_upper(row.object) == ascii_upper(name) : row.object == name);
           });
  }

 private:
  static bool gives(const GrantRow& row, std::string_view privilege) {
    return std::any_of(row.privileges.begin(), row.privileges.end(),
                       [&](const std::string& p) { return p == privilege || p == "ALL"; });
  }

  std::vector<GrantRow> rows_;
  std::string_view database_;
};

std::string quoted(std::string_view name) {
  std::string out = "`";
  for (char c : name) out += c == '`' ? std::string("``") : std::string(1, c);
  return out + "`";
}

}  // namespace

std::vector<std::string> missing_mysql_migration_rights(std::span<const std::string> show_grants,
                                                        std::string_view database, const MyMigrationNeeds& needs) {
  RoleRows roles;
  std::vector<GrantRow> rows;
  for (auto& line : show_grants)
    if (auto row = parse_row(line, roles)) rows.push_back(std::move(*row));
  if (!std::includes(roles.listed.begin(), roles.listed.end(), roles.granted.begin(), roles.granted.end()))
    return {};  // a role's privileges are not shown: refuse nothing on a guess
  Rights rights(std::move(rows), database);
  std::vector<std::string> missing;
  auto db = quoted(database);
  auto lacking = [&](const std::vector<std::string>& names, std::string_view privilege, bool routine) {
    std::string list;
    for (auto& name : names)
      if (!rights.on_object(privilege, name, routine)) list += (list.empty() ? "" : ", ") + quoted(name);
    return list;
  };
  if (auto list = lacking(needs.create_tables, "CREATE", false); !list.empty())
    missing.push_back(fmt::format("CREATE on {}.* (to create {})", db, list));
  if (!needs.create_routines.empty() && !rights.on_database("CREATE ROUTINE"))
    missing.push_back(fmt::format("CREATE ROUTINE on {}.* (to create {})", db,
                                  lacking(needs.create_routines, "CREATE ROUTINE", true)));
  if (auto list = lacking(needs.alter_tables, "ALTER", false); !list.empty())
    missing.push_back(fmt::format("ALTER on {}.* (for ALTER TABLE {})", db, list));
  if (auto list = lacking(needs.replace_routines, "ALTER ROUTINE", true); !list.empty())
    missing.push_back(fmt::format("ALTER ROUTINE on {}.* (for CREATE OR REPLACE FUNCTION {})", db, list));
  std::string history_rights;
  for (std::string_view privilege : {"SELECT", "INSERT", "UPDATE"})
    if (!needs.history.empty() && !rights.on_object(privilege, needs.history, false))
      history_rights += (history_rights.empty() ? "" : ", ") + std::string(privilege);
  if (!history_rights.empty()) missing.push_back(fmt::format("{} on {}.{}", history_rights, db, quoted(needs.history)));
  return missing;
}

}  // namespace dblock::detail
