#pragma once
/// PostgreSQL-only calls on a connection the application owns. This header does not include
/// libpq: it declares libpq's `struct pg_conn` (PGconn) itself.

#include <chrono>
#include <cstdint>
#include <optional>

#include <dblock/advisory_key.hpp>
#include <dblock/store.hpp>

struct pg_conn;

#include <dblock/export.hpp>

namespace dblock::postgres {

struct XactLockOptions {
  /// A shared lock (pg_advisory_xact_lock_shared). Default: exclusive.
  bool shared = false;
  /// How long the server may wait for the lock (its own blocking wait, bounded by lock_timeout).
  /// Zero: try once. Default: zero.
  std::chrono::milliseconds timeout{0};
};

/// Takes a transaction-scoped advisory lock (pg_advisory_xact_lock) inside the transaction the
/// application has open on `conn`; the server releases it at COMMIT or ROLLBACK, so there is no
/// guard to release. One round trip, nothing left prepared on `conn`. A timeout neither aborts the
/// transaction nor changes its lock_timeout. Named locks: AdvisoryKey::from_name, the same key
/// LockMode::advisory uses, so the two exclude each other.
///
/// Returns the fencing token, drawn from `store`'s sequence after the grant (the same sequence
/// as every other dblock lock), or an empty optional when the lock was not granted in time.
/// @throws InvalidArgument when `store` is not PostgreSQL or `conn` is null or has no open,
///         healthy transaction; SchemaError when dblock's schema is missing or outdated;
///         ConnectionError/DatabaseError from the statement.
[[nodiscard]] DBLOCK_EXPORT std::optional<std::int64_t> try_xact_lock(Store& store, pg_conn* conn,
                                                                      const AdvisoryKey& key,
                                                                      XactLockOptions options = {});

}  // namespace dblock::postgres
