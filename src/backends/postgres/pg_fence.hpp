#pragma once
#include <memory>
#include <string_view>

#include "backends/fence_backend.hpp"
#include "backends/postgres/pg_connection.hpp"
#include "backends/session_pool.hpp"

namespace dblock::detail {

/// PostgreSQL's fenced transactions (migration 0009) on the backend's sessions.
[[nodiscard]] std::unique_ptr<FenceBackend> make_pg_fences(SessionPool<PgConnection>& pool, std::string_view schema,
                                                           std::string_view prefix, std::string_view redacted_uri);

}  // namespace dblock::detail
