// The public transaction-scoped lock call (include/dblock/postgres.hpp): checks the arguments and
// the schema, then hands over to the store's backend, which refuses unless it is PostgreSQL's.
#include <dblock/postgres.hpp>

#include <fmt/format.h>

#include "core/store_parts.hpp"

namespace dblock::postgres {

std::optional<std::int64_t> try_xact_lock(Store& store, pg_conn* conn, const AdvisoryKey& key,
                                          XactLockOptions options) {
  auto& backend = detail::StoreParts::backend(store);
  if (options.timeout.count() < 0)
    throw InvalidArgument(fmt::format("xact lock: timeout {}ms is negative", options.timeout.count()));
  if (backend.dialect() != detail::Dialect::postgresql)
    throw InvalidArgument(fmt::format("xact lock: the store is {}; transaction-scoped locks need a PostgreSQL store",
                                      detail::to_string(backend.dialect())));
  store.check_schema();
  return backend.xact_lock(conn, detail::AdvisoryTarget{key, {}, options.shared}, options.timeout);
}

}  // namespace dblock::postgres
