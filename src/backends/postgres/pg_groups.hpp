#pragma once
// PostgreSQL's group role: shared holders and permits, a member row each, and the writer mark
// that keeps new readers out while a writer waits.

#include <memory>

#include "backends/group_backend.hpp"

namespace dblock::detail {

struct PgDatabase;

/// Runs on `database`'s sessions, which must outlive it.
[[nodiscard]] std::unique_ptr<GroupBackend> make_pg_groups(PgDatabase& database);

}  // namespace dblock::detail
