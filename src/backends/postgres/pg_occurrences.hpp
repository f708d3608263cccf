#pragma once
#include <memory>
#include <string_view>

#include "backends/occurrence_backend.hpp"
#include "backends/postgres/pg_connection.hpp"
#include "backends/session_pool.hpp"

namespace dblock::detail {

/// PostgreSQL's occurrence records (migration 0007) on the backend's sessions, their statement ids
/// from the backend's `ids`.
[[nodiscard]] std::unique_ptr<OccurrenceBackend> make_pg_occurrences(SessionPool<PgConnection>& pool, StatementIds& ids,
                                                                     std::string_view schema, std::string_view prefix);

}  // namespace dblock::detail
