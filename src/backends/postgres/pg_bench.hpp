#pragma once
// PostgreSQL's bench floor: the same lock statements with bare libpq on one connection.

#include <memory>
#include <string>
#include <string_view>

#include "backends/bench_backend.hpp"
#include "backends/postgres/pg_sql.hpp"

namespace dblock::detail {

struct PgDatabase;

/// Which statements a raw client runs: dblock's acquire and last-level release, or PgSql's
/// hand-written pair, its delete committed synchronously or not.
enum class RawStatements { dblock, hand_written, hand_written_async_delete };

/// `unnamed`: behind a transaction pooler, statements are sent unnamed (PQexecParams).
[[nodiscard]] std::unique_ptr<RawLockClient> make_pg_raw_client(const std::string& uri, const PgSql& sql, bool unnamed,
                                                                RawStatements statements);

/// The fence scenario's floor: a write transaction in the bench's own table, fenced or not.
[[nodiscard]] std::unique_ptr<RawWriteClient> make_pg_raw_write_client(const std::string& uri, std::string_view schema,
                                                                       std::string_view prefix, bool unnamed);

/// The ceiling of the combined statements: acquire_many and release_last_many pipelined on one
/// connection (sent unnamed behind a transaction pooler).
[[nodiscard]] std::unique_ptr<RawBatchClient> make_pg_ceiling_client(const std::string& uri, const PgSql& sql,
                                                                     bool unnamed);

/// The bench role on `database`, which must outlive it: each raw client on a connection of its own.
[[nodiscard]] std::unique_ptr<BenchBackend> make_pg_bench(PgDatabase& database);

}  // namespace dblock::detail
