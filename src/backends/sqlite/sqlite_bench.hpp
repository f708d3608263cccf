#pragma once
// SQLite's bench role: the floor (the backend's statements with bare sqlite3 on one connection)
// and expired rows to reap.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "backends/bench_backend.hpp"
#include "backends/session_pool.hpp"
#include "backends/sqlite/sqlite_session.hpp"
#include "backends/sqlite/sqlite_sql.hpp"

namespace dblock::detail {

[[nodiscard]] std::unique_ptr<RawLockClient> make_sqlite_raw_client(const std::string& path,
                                                                    std::chrono::milliseconds busy_timeout,
                                                                    const SqliteSql& sql);

/// The fence scenario's floor: a write transaction in the bench's own table, fenced or not.
[[nodiscard]] std::unique_ptr<RawWriteClient> make_sqlite_raw_write_client(const std::string& path,
                                                                           std::chrono::milliseconds busy_timeout,
                                                                           std::string_view prefix);

/// The bench role: floors on their own connections to `path`, expired rows through `pool`.
[[nodiscard]] std::unique_ptr<BenchBackend> make_sqlite_bench(SessionPool<SqliteSession>& pool, std::string path,
                                                              std::chrono::milliseconds busy_timeout,
                                                              const SqliteSql& sql, std::string prefix);

}  // namespace dblock::detail
