#pragma once
#include <memory>
#include <string_view>

#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_session.hpp"
#include "backends/test_control_backend.hpp"

namespace dblock::detail {

/// SQLite's test control (dblock::testing) on the backend's sessions; `clock` is SqliteSql::now.
[[nodiscard]] std::unique_ptr<TestControlBackend> make_sqlite_test_control(SessionPool<SqliteSession>& pool,
                                                                           std::string_view prefix,
                                                                           std::string_view clock);

}  // namespace dblock::detail
