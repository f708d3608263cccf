#pragma once
#include <memory>

#include "backends/lock_backend.hpp"

namespace dblock::detail {

struct MyDatabase;

/// MySQL/MariaDB's (and Galera's) table-mode locks on `database`'s sessions (which it must outlive).
[[nodiscard]] std::unique_ptr<LockBackend> make_my_locks(MyDatabase& database);

}  // namespace dblock::detail
