#pragma once
// Release notifications on PostgreSQL: LISTEN on the installation's channel, on a dedicated
// session; a waiter watches a name by holding a shared advisory lock on it, so a releaser knows
// someone waits and notifies.

#include <cstdint>
#include <memory>
#include <string>

#include "backends/notification_backend.hpp"
#include "backends/postgres/pg_connection.hpp"

namespace dblock::detail {

[[nodiscard]] std::unique_ptr<ReleaseListener> make_pg_listener(std::unique_ptr<PgConnection> connection,
                                                                std::int32_t key, std::string channel);

}  // namespace dblock::detail
