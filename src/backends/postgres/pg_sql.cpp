#include "backends/postgres/pg_sql.hpp"
#include "base/sql_template.hpp"

#include <charconv>

#include <fmt/format.h>

namespace dblock::detail {

std::int64_t to_int64(const PGresult* result, int row, int column) {
  const char* text = PQgetvalue(result, row, column);
  std::int64_t value = 0;
  std::from_chars(text, text + PQgetlength(result, row, column), value);
  return value;
}

std::string text_of(const PGresult* result, int row, int column) {
  return {PQgetvalue(result, row, column), static_cast<std::size_t>(PQgetlength(result, row, column))};
}

/// FNV-1a: a stable 32-bit namespace for this installation's advisory keys and channel name.
std::int32_t installation_key(std::string_view schema, std::string_view prefix) {
  std::uint32_t hash = 2166136261u;
  for (char c : fmt::format("{}.{}", schema, prefix)) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 16777619u;
  }
  return static_cast<std::int32_t>(hash);
}

std::vector<AppliedMigration> parse_history(const PGresult* result) {
  std::vector<AppliedMigration> applied;
  for (int row = 0; row < PQntuples(result); ++row)
    applied.push_back(AppliedMigration{static_cast<int>(to_int64(result, row, 0)), text_of(result, row, 1),
                                       text_of(result, row, 2), text_of(result, row, 3) == "t"});
  return applied;
}

std::string pg_grant_channel(std::string_view release_channel) { return std::string(release_channel) + "_grants"; }

PgSqlText::PgSqlText(std::string_view schema, std::string_view prefix, std::int32_t key, std::string_view channel)
    : schema_(schema),
      prefix_(prefix),
      key_(std::to_string(key)),
      channel_(channel),
      timeout_(std::to_string(kPgBatchLockTimeoutMs)) {}

std::string PgSqlText::operator()(std::string_view sql) const {
  return detail::fill(sql, {{"{schema}", schema_},
                            {"{prefix}", prefix_},
                            {"{key}", key_},
                            {"{channel}", channel_},
                            {"{grant_channel}", pg_grant_channel(channel_)},
                            {"{batch_lock_timeout_ms}", timeout_}});
}

PgSql::PgSql(StatementIds& ids, std::string_view schema, std::string_view prefix, std::int32_t key,
             std::string_view channel)
    : PgSql(ids, PgSqlText(schema, prefix, key, channel)) {}

PgSql::PgSql(StatementIds& ids, const PgSqlText& text)
    : PgLockSql(ids, text),
      PgAdminSql(ids, text),
      PgGroupSql(ids, text),
      PgQueueSql(ids, text),
      PgBenchSql(text),
      PgMigrationSql(text) {}

}  // namespace dblock::detail
