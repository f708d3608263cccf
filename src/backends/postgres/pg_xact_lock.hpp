#pragma once
// PostgreSQL's transaction-scoped locks (postgres::try_xact_lock): pg_advisory_xact_lock on the
// application's own connection inside its open transaction. A role only a PostgreSQL backend has
// (Backend::xact_locks()); no libpq include, so the core can hold it.

#include <chrono>
#include <cstdint>
#include <optional>

#include "backends/advisory_backend.hpp"

struct pg_conn;  // libpq's PGconn, declared as <dblock/postgres.hpp> does

namespace dblock::detail {

class PgXactLocks {
 public:
  virtual ~PgXactLocks() = default;
  /// Takes `target` for the rest of the transaction open on `conn`, waiting up to `wait`; the
  /// fencing token, or empty when not granted.
  /// @throws InvalidArgument when `conn` has no open, healthy transaction.
  virtual std::optional<std::int64_t> xact_lock(pg_conn* conn, const AdvisoryTarget& target,
                                                std::chrono::milliseconds wait) = 0;
};

}  // namespace dblock::detail
