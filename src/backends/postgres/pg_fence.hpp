#pragma once
#include <memory>
#include <string_view>

#include "backends/fence_backend.hpp"
#include "backends/postgres/pg_connection.hpp"
#include "backends/session_pool.hpp"

namespace dblock::detail {

/// PostgreSQL's fenced transactions (migration 0009) on the backend's sessions, the fence's
/// statement ids from the backend's `ids` (callers' statements are sent unprepared).
[[nodiscard]] std::unique_ptr<FenceBackend> make_pg_fences(SessionPool<PgConnection>& pool, StatementIds& ids,
                                                           std::string_view schema, std::string_view prefix,
                                                           std::string_view redacted_uri);

}  // namespace dblock::detail
