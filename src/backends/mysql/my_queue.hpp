#pragma once
// MySQL/MariaDB's (and Galera's) fair-queue role (migrations 0017 and 0018, doc/fair-queue.md):
// waiters as rows, granted in arrival order by the release that hands the name on.

#include <memory>
#include <string_view>

#include "backends/mysql/my_connection.hpp"
#include "backends/queue_backend.hpp"
#include "backends/session_pool.hpp"

namespace dblock::detail {

/// The queue on the backend's sessions, its statement ids from the backend's `ids`.
[[nodiscard]] std::unique_ptr<QueueBackend> make_my_queue(SessionPool<MyConnection>& pool, StatementIds& ids,
                                                          std::string_view prefix);

}  // namespace dblock::detail
