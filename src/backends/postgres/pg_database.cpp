#include "backends/postgres/pg_database.hpp"

#include <fmt/format.h>

#include "backends/backend_errors.hpp"
#include "base/holder_kind.hpp"

namespace dblock::detail {

PgDatabase::PgDatabase(const StoreUri& uri, const BackendSettings& settings)
    : schema(uri.schema),
      prefix(uri.prefix),
      driver_uri(uri.driver_uri),
      key(installation_key(uri.schema, uri.prefix)),
      channel(fmt::format("dblock_release_{:08x}", static_cast<std::uint32_t>(key))),
      sql(ids, uri.schema, uri.prefix, key, channel),
      advisory_sql(ids, uri.schema, uri.prefix),
      mode(std::make_shared<PgStatementMode>(uri.transaction_pooler)),
      session_pooler(uri.session_pooler),
      pool(
          [driver_uri = uri.driver_uri, redacted = uri.redacted, settings, mode = mode] {
            return std::make_unique<PgConnection>(driver_uri, redacted, settings.connect_timeout,
                                                  settings.statement_timeout, settings.logger, mode);
          },
          uri.redacted, uri.pool_size, settings.connect_timeout) {
  auto first = pool.lease();
  engine = pg_engine_of(first->reported("server_version"), first->reported("crdb_version"));
}

namespace {

/// The arrays of a renewal: names, owners, tokens, TTLs, and the kinds when `with_kinds`.
std::vector<std::string> renewal_arrays(std::span<const HeldRef> held, bool with_kinds) {
  std::vector<std::string_view> names, owners, kinds;
  std::string tokens = "{", ttls = "{";
  for (std::size_t i = 0; i < held.size(); ++i) {
    names.push_back(held[i].name);
    owners.push_back(held[i].owner);
    kinds.push_back(kind_text(held[i].kind));
    tokens += fmt::format("{}{}", i == 0 ? "" : ",", held[i].token);
    ttls += fmt::format("{}{}", i == 0 ? "" : ",", held[i].ttl.count());
  }
  std::vector<std::string> arrays{pg_text_array(names), pg_text_array(owners)};
  if (with_kinds) arrays.push_back(pg_text_array(kinds));
  arrays.push_back(tokens + "}");
  arrays.push_back(ttls + "}");
  return arrays;
}

}  // namespace

Renewal pg_renew(PgDatabase& database, const PgStatement& statement, std::span<const HeldRef> held, bool with_kinds,
                 std::chrono::steady_clock::time_point reply_by) {
  // A try (the core repeats one whose reply was lost) is pointless once the first deadline has passed.
  if (std::chrono::steady_clock::now() >= reply_by)
    throw OutcomeUnknown("renewal: no time left before the first local deadline", "57014");
  auto params = renewal_arrays(held, with_kinds);
  auto session = database.pool.lease();
  auto limit = session->limit_replies(reply_by);
  auto result = run_table_statement(*session, statement, params);
  Renewal renewal;
  bool tells_asks = PQnfields(result.get()) > 1;  // renew_held_noting_asks; memberships are never asked
  for (int row = 0; row < PQntuples(result.get()); ++row) {
    auto position = to_int64(result.get(), row, 0);  // -(position + 1): left alone, busy
    if (position < 0) {
      renewal.busy.push_back(static_cast<std::size_t>(-position - 1));
      continue;
    }
    renewal.renewed.push_back(static_cast<std::size_t>(position));
    if (tells_asks && text_of(result.get(), row, 1) == "t") renewal.asked.push_back(static_cast<std::size_t>(position));
  }
  return renewal;
}

}  // namespace dblock::detail
