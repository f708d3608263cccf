// The public transaction-scoped lock call: checks the store, then hands over to the backend's SQL.
#include <dblock/postgres.hpp>

#include <fmt/format.h>

#include "backends/postgres/pg_advisory.hpp"
#include "core/store_impl.hpp"

namespace dblock::postgres {

std::optional<std::int64_t> try_xact_lock(Store& store, pg_conn* conn, const AdvisoryKey& key,
                                          XactLockOptions options) {
  auto& impl = detail::StoreAccess::impl(store);
  if (!impl.backend->has_advisory_locks()) throw InvalidArgument(impl.backend->no_advisory_message());
  if (options.timeout.count() < 0)
    throw InvalidArgument(fmt::format("xact lock: timeout {}ms is negative", options.timeout.count()));
  store.check_schema();
  detail::PgAdvisorySql sql(impl.uri.schema, impl.uri.prefix);
  return detail::pg_xact_lock(conn, sql, detail::AdvisoryTarget{key, {}, options.shared}, options.timeout);
}

}  // namespace dblock::postgres
