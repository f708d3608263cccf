#pragma once
// MySQL/MariaDB's bench floor: the same prepared statements with bare Connector/C++ on one connection.

#include <memory>
#include <string_view>

#include "backends/bench_backend.hpp"
#include "backends/mysql/my_connection.hpp"
#include "backends/mysql/my_sql.hpp"

namespace dblock::detail {

/// `ids`: the registry `sql` was numbered by (the client's own statements join it, as they run on
/// the same connection).
[[nodiscard]] std::unique_ptr<RawLockClient> make_my_raw_client(std::unique_ptr<MyConnection> connection,
                                                                const MySql& sql, StatementIds& ids);

/// The fence scenario's floor: a write transaction in the bench's own table, fenced or not.
[[nodiscard]] std::unique_ptr<RawWriteClient> make_my_raw_write_client(std::unique_ptr<MyConnection> connection,
                                                                       std::string_view prefix);

}  // namespace dblock::detail
