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

struct PgDatabase;

[[nodiscard]] std::unique_ptr<ReleaseListener> make_pg_listener(std::unique_ptr<PgConnection> connection,
                                                                std::int32_t key, std::string channel);

/// The notification role on `database`, which must outlive it: each listener on a dedicated
/// session; none behind a transaction pooler (LISTEN and the watch locks are session state).
[[nodiscard]] std::unique_ptr<NotificationBackend> make_pg_notifications(PgDatabase& database);

}  // namespace dblock::detail
