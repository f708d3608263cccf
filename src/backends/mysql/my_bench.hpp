#pragma once
// MySQL/MariaDB's bench floor: the same prepared statements with bare Connector/C++ on one connection.

#include <memory>

#include "backends/bench_backend.hpp"

namespace dblock::detail {

struct MyDatabase;

/// The bench role on `database` (which it must outlive): raw clients on dedicated connections, the
/// lock client's prepared statements those of `database`'s MySql, and expired rows to reap.
[[nodiscard]] std::unique_ptr<BenchBackend> make_my_bench(MyDatabase& database);

}  // namespace dblock::detail
