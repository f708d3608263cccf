#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "backends/fence_backend.hpp"
#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_session.hpp"

namespace dblock::detail {

/// SQLite's fenced transactions (migration 0009: BEGIN IMMEDIATE, then the fence view's insert) on
/// the backend's sessions.
[[nodiscard]] std::unique_ptr<FenceBackend> make_sqlite_fences(SessionPool<SqliteSession>& pool,
                                                               std::string_view prefix, std::string path);

}  // namespace dblock::detail
