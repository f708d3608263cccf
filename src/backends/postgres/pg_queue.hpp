#pragma once
// PostgreSQL's fair-queue role (doc/fair-queue.md): waiters as rows, granted in arrival order by the
// release that hands the name on.

#include <memory>

#include "backends/queue_backend.hpp"

namespace dblock::detail {

struct PgDatabase;

/// Runs on `database`'s sessions, which must outlive it.
[[nodiscard]] std::unique_ptr<QueueBackend> make_pg_queue(PgDatabase& database);

}  // namespace dblock::detail
