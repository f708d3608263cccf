#pragma once
// Release notifications on PostgreSQL: LISTEN on the installation's channel, on a dedicated
// session; a waiter watches a name by holding a shared advisory lock on it, so a releaser knows
// someone waits and notifies. The fair queue's releases also name the waiter they granted, with
// its grant, on a second channel (pg_grant_channel).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "backends/notification_backend.hpp"
#include "backends/postgres/pg_connection.hpp"

namespace dblock::detail {

struct PgDatabase;

/// A notice on the grant channel (migration 0020's release_granting): empty when malformed.
[[nodiscard]] std::optional<ReleaseNotice> parse_pg_grant_notice(std::string_view payload);

[[nodiscard]] std::unique_ptr<ReleaseListener> make_pg_listener(std::unique_ptr<PgConnection> connection,
                                                                std::int32_t key, std::string channel);

/// The notification role on `database`, which must outlive it: each listener on a dedicated
/// session; none behind a transaction pooler (LISTEN and the watch locks are session state).
[[nodiscard]] std::unique_ptr<NotificationBackend> make_pg_notifications(PgDatabase& database);

}  // namespace dblock::detail
