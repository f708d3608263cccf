#include "backends/mysql/my_sql.hpp"

#include <array>
#include <charconv>
#include <ranges>
#include <string>

#include <dblock/errors.hpp>

namespace dblock::detail {

namespace {

/// Calls `each` with the elements of a comma-separated list, each position checked against `size`.
template <std::size_t N, class Each>
void for_each_position(std::string_view text, std::size_t size, std::string_view what, Each&& each) {
  if (text.empty()) return;
  for (auto part : std::views::split(text, ',')) {
    auto values = parse_numbers<N>(std::string_view(part.begin(), part.end()), what);
    if (values[0] < 0 || static_cast<std::size_t>(values[0]) >= size)
      throw DatabaseError(fmt::format("{} answered position {} for {} requests", what, values[0], size));
    each(values);
  }
}

}  // namespace

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

std::vector<std::optional<Grant>> parse_positions_with_grants(std::string_view text, std::size_t requests) {
  std::vector<std::optional<Grant>> outcomes(requests);
  for_each_position<3>(text, requests, "acquire_many", [&](const std::array<std::int64_t, 3>& values) {
    outcomes[static_cast<std::size_t>(values[0])] = Grant{values[1], values[2]};
  });
  return outcomes;
}

std::vector<bool> parse_positions(std::string_view text, std::size_t requests) {
  std::vector<bool> deleted(requests, false);
  for_each_position<1>(text, requests, "release_last_many", [&](const std::array<std::int64_t, 1>& values) {
    deleted[static_cast<std::size_t>(values[0])] = true;
  });
  return deleted;
}

}  // namespace dblock::detail
