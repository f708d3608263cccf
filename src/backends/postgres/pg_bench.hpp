#pragma once
// PostgreSQL's bench floor: the same lock statements with bare libpq on one connection.

#include <memory>
#include <string>

#include "backends/bench_backend.hpp"
#include "backends/postgres/pg_sql.hpp"

namespace dblock::detail {

/// `unnamed`: behind a transaction pooler, statements are sent unnamed (PQexecParams).
/// `hand_written`: PgSql's hand_written_acquire/release instead of dblock's statements.
[[nodiscard]] std::unique_ptr<RawLockClient> make_pg_raw_client(const std::string& uri, const PgSql& sql, bool unnamed,
                                                                bool hand_written = false);

}  // namespace dblock::detail
