#include "backends/mysql/my_sql.hpp"

#include <string>

namespace dblock::detail {

std::vector<AppliedMigration> parse_history(const MyRows& rows) {
  std::vector<AppliedMigration> applied;
  for (auto& row : rows)
    applied.push_back(AppliedMigration{static_cast<int>(row.num(0)), row.str(1), row.str(2), row.num(3) != 0});
  return applied;
}

std::optional<Grant> parse_grant(const MyRows& rows) {
  if (rows.empty() || !rows.front().text(0)) return std::nullopt;
  auto& text = *rows.front().text(0);
  auto space = text.find(' ');
  return Grant{std::stoll(text.substr(0, space)), std::stoll(text.substr(space + 1))};
}

}  // namespace dblock::detail
