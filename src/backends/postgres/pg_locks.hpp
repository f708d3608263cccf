#pragma once
// PostgreSQL's lock role (table mode): takes, re-enters, renews and releases rows of the lock
// table, alone or many names to a statement, and lists, revokes and reaps them.

#include <memory>

#include "backends/lock_backend.hpp"

namespace dblock::detail {

struct PgDatabase;

/// Runs on `database`'s sessions, which must outlive it.
[[nodiscard]] std::unique_ptr<LockBackend> make_pg_locks(PgDatabase& database);

}  // namespace dblock::detail
