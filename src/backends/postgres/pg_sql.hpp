#pragma once
// Every SQL statement PostgreSQL's table mode, waiting and migrations send, built once per store
// for its schema and prefix, and the small readers of their results.

#include <libpq-fe.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backends/migration_backend.hpp"
#include "backends/postgres/pg_connection.hpp"

namespace dblock::detail {

[[nodiscard]] std::int64_t to_int64(const PGresult* result, int row, int column);
[[nodiscard]] std::string text_of(const PGresult* result, int row, int column);
/// FNV-1a: a stable 32-bit namespace for this installation's advisory keys and channel name.
[[nodiscard]] std::int32_t installation_key(std::string_view schema, std::string_view prefix);
/// The rows of PgSql::history.
[[nodiscard]] std::vector<AppliedMigration> parse_history(const PGresult* result);

/// How long an acquisition statement may wait for a lock before it gives way (55P03; a combined
/// one as a whole): well below deadlock_timeout (1 s), so in a cycle with an application's
/// fenced transaction the batch, not the application, is the one that yields.
inline constexpr int kPgBatchLockTimeoutMs = 200;

/// The channel on which the fair queue's releases name the waiter they granted (pg_listener.hpp).
[[nodiscard]] std::string pg_grant_channel(std::string_view release_channel);

/// Fills the placeholders the statements of one store share: {schema}, {prefix}, {key} (the
/// installation's advisory namespace), {channel} (its NOTIFY channel), {grant_channel} and
/// {batch_lock_timeout_ms}.
class PgSqlText {
 public:
  PgSqlText(std::string_view schema, std::string_view prefix, std::int32_t key, std::string_view channel);
  [[nodiscard]] std::string operator()(std::string_view sql) const;

 private:
  std::string schema_, prefix_, key_, channel_, timeout_;
};

/// A lock's own statements: grants (one name or a combined batch), releases, renewals, its lease, and the two ends a
/// revoked or minimum-held row has. (pg_sql_locks.cpp)
struct PgLockSql {
  PgLockSql(StatementIds& ids, const PgSqlText& fill);
  PgStatement acquire, acquire_many, release, release_last, release_last_many, renew, lease_left, acknowledge_revoked,
      release_keeping;
};

/// What operators and the reaper send: the listing, a forced release, revocation, reaping and the census.
/// (pg_sql_admin.cpp)
struct PgAdminSql {
  PgAdminSql(StatementIds& ids, const PgSqlText& fill);
  PgStatement list, force_release, revoke, ask_release, set_note, reap, census;
};

/// Semaphores' and reader-writer locks' statements: memberships taken, released and renewed, and a waiting writer's
/// mark. (pg_sql_groups.cpp)
struct PgGroupSql {
  PgGroupSql(StatementIds& ids, const PgSqlText& fill);
  PgStatement acquire_member, release_member, renew_members, lease_left_marking_writer, first_lease_end, unmark_writer;
};

/// The fair queue's: a waiter's turn, look and leave, the release that hands the name on, the reaper's
/// delete of dead waiters and the operators' listing. (pg_sql_queue.cpp)
struct PgQueueSql {
  PgQueueSql(StatementIds& ids, const PgSqlText& fill);
  PgStatement take_turn, look, leave, release_granting, reap_waiters, waiter_rows, list_waiters, place, wait_edges;
};

/// `dblock bench`'s: the hand-written floor and the rows its reaper scenario seeds. (pg_sql_bench.cpp)
struct PgBenchSql {
  explicit PgBenchSql(const PgSqlText& fill);
  std::string hand_written_acquire, hand_written_release, hand_written_release_async, seed_expired;
};

/// The migrator's: the history table, its advisory lock, the schema, and the rights and catalog checks.
/// (pg_sql_migrations.cpp)
struct PgMigrationSql {
  explicit PgMigrationSql(const PgSqlText& fill);
  std::string schema_version, history_table, history, record, forget, migration_lock, migration_xact_lock,
      migration_lock_blocking, migration_unlock, create_schema, migration_rights, catalog;
};

/// Every SQL statement PostgreSQL's table mode, groups, the bench and migrations send, built once
/// per store for its schema and prefix, grouped by the role that sends them; the prepared ones take
/// their ids from the store's `ids`.
struct PgSql : PgLockSql, PgAdminSql, PgGroupSql, PgQueueSql, PgBenchSql, PgMigrationSql {
  PgSql(StatementIds& ids, std::string_view schema, std::string_view prefix, std::int32_t key,
        std::string_view channel);

 private:
  PgSql(StatementIds& ids, const PgSqlText& text);
};

}  // namespace dblock::detail
