#pragma once
#include <memory>

#include "backends/group_backend.hpp"

namespace dblock::detail {

struct MyDatabase;

/// MySQL/MariaDB's (and Galera's) groups of holders (the functions of migration 0004) on
/// `database`'s sessions (which it must outlive).
[[nodiscard]] std::unique_ptr<GroupBackend> make_my_groups(MyDatabase& database);

}  // namespace dblock::detail
