#pragma once
#include <memory>
#include <string_view>

#include "backends/fence_backend.hpp"
#include "backends/mysql/my_connection.hpp"
#include "backends/session_pool.hpp"

namespace dblock::detail {

/// MySQL/MariaDB's (and Galera's) fenced transactions (migration 0009) on the backend's sessions;
/// the fence's statements and the callers' take their ids from the backend's `ids`.
[[nodiscard]] std::unique_ptr<FenceBackend> make_my_fences(SessionPool<MyConnection>& pool, StatementIds& ids,
                                                           std::string_view prefix, std::string_view redacted_uri);

}  // namespace dblock::detail
