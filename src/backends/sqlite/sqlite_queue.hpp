#pragma once
// SQLite's fair-queue role (migration 0017, doc/fair-queue.md): waiters as rows, granted in arrival
// order by the release that hands the name on, each operation one IMMEDIATE transaction.

#include <memory>
#include <string_view>

#include "backends/queue_backend.hpp"
#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_session.hpp"

namespace dblock::detail {

[[nodiscard]] std::unique_ptr<QueueBackend> make_sqlite_queue(SessionPool<SqliteSession>& pool, std::string_view prefix,
                                                              std::string_view clock);  // SqliteSql::now

}  // namespace dblock::detail
