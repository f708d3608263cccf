// The public transaction-scoped lock call (include/dblock/postgres.hpp): checks the arguments and
// the schema, then hands over to the store's transaction-scoped lock role, which only a PostgreSQL
// store has (elsewhere the role's absence says why).
#include <dblock/postgres.hpp>

#include <fmt/format.h>

#include "backends/postgres/pg_xact_lock.hpp"
#include "core/store_parts.hpp"

namespace dblock::postgres {

std::optional<std::int64_t> try_xact_lock(Store& store, pg_conn* conn, const AdvisoryKey& key,
                                          XactLockOptions options) {
  if (options.timeout.count() < 0)
    throw InvalidArgument(fmt::format("xact lock: timeout {}ms is negative", options.timeout.count()));
  auto& xact_locks = detail::StoreParts::backend(store).xact_locks().get();
  store.check_schema();
  return xact_locks.xact_lock(conn, detail::AdvisoryTarget{key, {}, options.shared}, options.timeout);
}

}  // namespace dblock::postgres
