#pragma once
#include <memory>
#include <string_view>

#include "backends/occurrence_backend.hpp"
#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_session.hpp"

namespace dblock::detail {

/// SQLite's occurrence records (migration 0007) on the backend's sessions.
[[nodiscard]] std::unique_ptr<OccurrenceBackend> make_sqlite_occurrences(SessionPool<SqliteSession>& pool,
                                                                         std::string_view prefix,
                                                                         std::string_view clock);  // SqliteSql::now

}  // namespace dblock::detail
