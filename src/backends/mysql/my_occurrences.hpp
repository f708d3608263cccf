#pragma once
#include <memory>
#include <string_view>

#include "backends/mysql/my_connection.hpp"
#include "backends/occurrence_backend.hpp"
#include "backends/session_pool.hpp"

namespace dblock::detail {

/// MySQL/MariaDB's (and Galera's) occurrence records (migration 0007) on the backend's sessions,
/// their statement ids from the backend's `ids`.
[[nodiscard]] std::unique_ptr<OccurrenceBackend> make_my_occurrences(SessionPool<MyConnection>& pool, StatementIds& ids,
                                                                     std::string_view prefix);

}  // namespace dblock::detail
