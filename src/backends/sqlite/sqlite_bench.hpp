#pragma once
// SQLite's bench floor: the backend's statements with bare sqlite3 on one connection.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "backends/bench_backend.hpp"
#include "backends/sqlite/sqlite_sql.hpp"

namespace dblock::detail {

[[nodiscard]] std::unique_ptr<RawLockClient> make_sqlite_raw_client(const std::string& path,
                                                                    std::chrono::milliseconds busy_timeout,
                                                                    const SqliteSql& sql);

/// The fence scenario's floor: a write transaction in the bench's own table, fenced or not.
[[nodiscard]] std::unique_ptr<RawWriteClient> make_sqlite_raw_write_client(const std::string& path,
                                                                           std::chrono::milliseconds busy_timeout,
                                                                           std::string_view prefix);

}  // namespace dblock::detail
