#pragma once
// Every SQL statement MySQL/MariaDB's table mode and migrations send, built once per store for its
// prefix, and the readers of their results.

#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "backends/lock_backend.hpp"
#include "backends/migration_backend.hpp"
#include "backends/mysql/my_connection.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

inline std::int64_t micros(std::chrono::milliseconds duration) { return duration.count() * 1000; }

/// Every SQL statement of table mode, built once per store for its prefix, their ids from the
/// store's `ids`. Tables are not qualified: they live in the database the URI names, which every
/// session uses. `galera`: the schema of migrations/galera (no token sequence).
struct MySql {
  MySql(StatementIds& ids, std::string_view prefix, bool galera = false) {
    auto make = [&](const char* name, std::string_view sql) {
      // A seeded (expired) row's token is never handed out: a grant draws a new one. Galera has no
      // sequence to draw it from.
      std::string_view seed_token = galera ? "0" : "NEXTVAL(`{prefix}token_seq`)";
      return MyStatement(
          ids, name, fill(fill(sql, {{"{seed_token}", seed_token}}), {{"{prefix}", prefix}, {"{held}", kHeldTable}}));
    };
    // Migration 0008's acquire_held with the lock's lock-delay (doc/semantics.md, "Lock-delay").
    // acquire_delayed refuses a name another owner holds live without locking its row (migration
    // 0016); what it may still wait for (a fence past its lease, or the caller's own fence under a
    // re-entry) is bounded by the smallest lock wait that still waits (1 s): a try answers busy
    // then (1205), and a combined call gives way to its requests sent alone.
    acquire = make("acquire",
                   "SET STATEMENT innodb_lock_wait_timeout = 1 FOR SELECT `{prefix}acquire_delayed`(?, ?, ?, ?, ?)");
    release = make("release", "SELECT `{prefix}release`(?, ?, ?)");
    // The caller's last level: the row goes whatever its count (LockBackend::release_last).
    release_last = make("release_last", "DELETE FROM `{prefix}locks` WHERE name = ? AND owner = ? AND token = ?");
    // One statement renews every lock; affected rows says whether all were renewed (no UPDATE
    // ... RETURNING on MariaDB), and only when some were not does renewed_of ask which.
    // A lease is live until expires_at - lock_delay_ms (migration 0008), and a renewal keeps the
    // lock-delay after the renewed lease.
    // It never waits for a row lock (NOWAIT, 1205 at once): a row another transaction holds (an
    // application's fence share-locks it) fails the statement, and MyLocks then renews each lock
    // alone (renew_one), reporting that one busy.
    renew = make("renew", R"(
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
UPDATE `{prefix}locks` l JOIN {held} ON l.name = h.name AND l.owner = h.owner AND l.token = h.token
SET l.expires_at = GREATEST(l.expires_at, UTC_TIMESTAMP(6) + INTERVAL (h.ttl_us + l.lock_delay_ms * 1000) MICROSECOND)
WHERE l.expires_at - INTERVAL (l.lock_delay_ms * 1000) MICROSECOND > UTC_TIMESTAMP(6)
  AND NOT l.release_asked_token <=> l.token)");
    // The rows `renew` leaves because their grant was asked to let go (migration 0019): renewed
    // here, then renewed_of tells which they were.
    renew_asked = make("renew_asked", R"(
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
UPDATE `{prefix}locks` l JOIN {held} ON l.name = h.name AND l.owner = h.owner AND l.token = h.token
SET l.expires_at = GREATEST(l.expires_at, UTC_TIMESTAMP(6) + INTERVAL (h.ttl_us + l.lock_delay_ms * 1000) MICROSECOND)
WHERE l.expires_at - INTERVAL (l.lock_delay_ms * 1000) MICROSECOND > UTC_TIMESTAMP(6)
  AND l.release_asked_token = l.token)");
    // One lock by its primary key, locking no other row: `renew`'s join may lock every row it
    // scans (a small table is scanned), the fenced one included.
    renew_one = make("renew_one", R"(
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
UPDATE `{prefix}locks`
SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL (? + lock_delay_ms * 1000) MICROSECOND)
WHERE name = ? AND owner = ? AND token = ?
  AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > UTC_TIMESTAMP(6))");
    renewed_of = make("renewed", R"(
SELECT h.position - 1, l.release_asked_token <=> l.token FROM `{prefix}locks` l JOIN {held} ON l.name = h.name AND l.owner = h.owner AND l.token = h.token
WHERE l.expires_at - INTERVAL (l.lock_delay_ms * 1000) MICROSECOND > UTC_TIMESTAMP(6))");
    lease_left = make("lease_left", R"(
SELECT FLOOR(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000) FROM `{prefix}locks` WHERE name = ?)");
    // One row per holder: a group's lock row stands for its members, listed instead.
    list = make("list", R"(
SELECT name, owner, count, token, remaining, kind, lock_delay_ms, held_for, note FROM (
  SELECT name, owner, count, token, FLOOR(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000) AS remaining,
         'exclusive' AS kind, lock_delay_ms,
         FLOOR(TIMESTAMPDIFF(MICROSECOND, acquired_at, UTC_TIMESTAMP(6)) / 1000) AS held_for,
         IF(note_token <=> token, COALESCE(holder_note, ''), '') AS note
  FROM `{prefix}locks` WHERE (? = '' OR name = ?) AND owner NOT IN ('(permits)', '(readers)')
  UNION ALL
  SELECT m.name, m.owner, m.count, m.token, FLOOR(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), m.expires_at) / 1000),
         m.kind, 0, FLOOR(TIMESTAMPDIFF(MICROSECOND, m.acquired_at, UTC_TIMESTAMP(6)) / 1000), ''
  FROM `{prefix}holders` m JOIN `{prefix}locks` l
    ON l.name = m.name AND l.token = m.epoch AND l.owner = IF(m.kind = 'permit', '(permits)', '(readers)')
  WHERE (? = '' OR m.name = ?) AND m.kind <> 'writer') AS holders
ORDER BY name, owner LIMIT ?)");
    force_release = make("force_release", "DELETE FROM `{prefix}locks` WHERE name = ?");
    // DELETE re-checks the expiry on the newest row version under its row lock, so a row taken
    // over or renewed meanwhile stays. Oldest first: the plain ORDER BY form deadlocked least
    // with acquirers (doc/database-facts.md §3); what deadlocks is retried.
    reap = make("reap", "DELETE FROM `{prefix}locks` WHERE expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ?");
    reap_members =
        make("reap_members",
             "DELETE FROM `{prefix}holders` WHERE expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ?");
    acquire_member = make("acquire_member", "SELECT `{prefix}acquire_member`(?, ?, ?, ?, ?, ?)");
    release_member = make("release_member", "SELECT `{prefix}release_member`(?, ?, ?, ?)");
    renew_members = make("renew_members", "SELECT `{prefix}renew_members`(?)");
    lease_left_of_readers = make("lease_left_of_readers", R"(
SELECT FLOOR(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000), owner = '(readers)'
FROM `{prefix}locks` WHERE name = ?)");
    mark_writer = make("mark_writer", R"(
INSERT INTO `{prefix}holders` (name, owner, kind, count, token, epoch, acquired_at, expires_at)
VALUES (?, ?, 'writer', 0, 0, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at))");
    first_lease_end = make("first_lease_end", R"(
SELECT FLOOR(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), COALESCE(
         (SELECT MIN(m.expires_at) FROM `{prefix}holders` m
          WHERE l.owner = '(permits)' AND m.name = l.name AND m.kind = 'permit' AND m.epoch = l.token
            AND m.expires_at > UTC_TIMESTAMP(6)),
         l.expires_at)) / 1000)
FROM `{prefix}locks` l WHERE l.name = ?)");
    unmark_writer =
        make("unmark_writer", "DELETE FROM `{prefix}holders` WHERE name = ? AND owner = ? AND kind = 'writer'");
    census = make("census", R"(
SELECT COALESCE(SUM(expires_at > UTC_TIMESTAMP(6)), 0), COALESCE(SUM(expires_at <= UTC_TIMESTAMP(6)), 0),
       COALESCE(FLOOR(TIMESTAMPDIFF(MICROSECOND, MIN(IF(expires_at > UTC_TIMESTAMP(6), acquired_at, NULL)),
                                    UTC_TIMESTAMP(6)) / 1000), 0),
       (SELECT COUNT(*) FROM `{prefix}waiters` WHERE expires_at > UTC_TIMESTAMP(6))
FROM `{prefix}locks`)");
    seed_expired = make("seed_expired", R"(
INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at)
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?)
SELECT CONCAT(?, ? + i), 'dblock-bench', 1, {seed_token}, UTC_TIMESTAMP(6) - INTERVAL 2 SECOND,
       UTC_TIMESTAMP(6) - INTERVAL 1 SECOND FROM g)");
    schema_version =
        make("schema_version", "SELECT COALESCE(MAX(version), 0) FROM `{prefix}schema_history` WHERE success");
    history = make("history", "SELECT version, name, checksum, success FROM `{prefix}schema_history` ORDER BY version");
    record_started = make("record_started", R"(
INSERT INTO `{prefix}schema_history` (version, name, checksum, applied_at, applied_by, execution_ms, success)
VALUES (?, ?, ?, UTC_TIMESTAMP(6), ?, 0, FALSE)
ON DUPLICATE KEY UPDATE applied_at = VALUES(applied_at), applied_by = VALUES(applied_by), success = FALSE)");
    record_done =
        make("record_done", "UPDATE `{prefix}schema_history` SET success = TRUE, execution_ms = ? WHERE version = ?");
    forget = make("forget", "DELETE FROM `{prefix}schema_history` WHERE version = ?");
    // Names as one comma-separated parameter (dblock's never hold a comma); routine names compare
    // without case, as MySQL resolves them.
    grants = make("grants", "SHOW GRANTS");
    catalog = make("catalog", R"(
SELECT TABLE_NAME, CASE TABLE_TYPE WHEN 'BASE TABLE' THEN 'table' WHEN 'SEQUENCE' THEN 'sequence'
                                   WHEN 'VIEW' THEN 'view' ELSE 'other' END, '',
       IF(TABLE_TYPE = 'BASE TABLE', (SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS c
                                      WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME), ''), '', 0,
       IF(TABLE_TYPE = 'BASE TABLE', (SELECT GROUP_CONCAT(CONCAT(COLUMN_TYPE, IF(IS_NULLABLE = 'NO', ' not null', ''),
                                                                 COALESCE(CONCAT(' collate ', COLLATION_NAME), ''))
                                                          ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS c
                                      WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME), '')
FROM information_schema.TABLES t WHERE TABLE_SCHEMA = DATABASE() AND FIND_IN_SET(CONVERT(TABLE_NAME USING utf8mb4), ?)
UNION ALL
SELECT INDEX_NAME, 'index', TABLE_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX), '', 0, ''
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND FIND_IN_SET(CONVERT(TABLE_NAME USING utf8mb4), ?) GROUP BY TABLE_NAME, INDEX_NAME
UNION ALL
SELECT ROUTINE_NAME, LOWER(ROUTINE_TYPE), '', '', COALESCE(ROUTINE_DEFINITION, ''), ROUTINE_DEFINITION IS NULL, ''
FROM information_schema.ROUTINES
WHERE ROUTINE_SCHEMA = DATABASE() AND FIND_IN_SET(LOWER(CONVERT(ROUTINE_NAME USING utf8mb4)), ?)
UNION ALL
SELECT TRIGGER_NAME, 'trigger', EVENT_OBJECT_TABLE, '', ACTION_STATEMENT, 0, '' FROM information_schema.TRIGGERS
WHERE TRIGGER_SCHEMA = DATABASE() AND FIND_IN_SET(CONVERT(TRIGGER_NAME USING utf8mb4), ?))");
    // Revocation, the holder's acknowledgement of it, and the minimum hold (as PgSql's; added last:
    // the ids of the statements above stay as they were).
    revoke = make("revoke", R"(
UPDATE `{prefix}locks` SET owner = CONCAT('(revoked)', LEFT(owner, 240))
WHERE name = ? AND expires_at > UTC_TIMESTAMP(6) AND owner NOT LIKE '(revoked)%' AND owner NOT LIKE '(min-hold)%')");
    // A holder's note, for its own grant (migration 0019).
    set_note = make("set_note", R"(
UPDATE `{prefix}locks` SET holder_note = ?, note_token = token WHERE name = ? AND owner = ? AND token = ?)");
    ask_release = make("ask_release", R"(
UPDATE `{prefix}locks` SET release_asked_token = token
WHERE name = ? AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > UTC_TIMESTAMP(6)
  AND owner NOT IN ('(permits)', '(readers)') AND owner NOT LIKE '(revoked)%' AND owner NOT LIKE '(min-hold)%')");
    // Affected rows count changed rows: an ask of a grant asked before changes nothing, and this
    // read says it stands.
    asked_already = make("asked_already", R"(
SELECT 1 FROM `{prefix}locks`
WHERE name = ? AND release_asked_token = token
  AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > UTC_TIMESTAMP(6)
  AND owner NOT IN ('(permits)', '(readers)') AND owner NOT LIKE '(revoked)%' AND owner NOT LIKE '(min-hold)%')");
    acknowledge_revoked = make("acknowledge_revoked", R"(
DELETE FROM `{prefix}locks` WHERE name = ? AND owner = CONCAT('(revoked)', LEFT(?, 240)) AND token = ?)");
    release_keeping = make("release_keeping", R"(
UPDATE `{prefix}locks`
SET owner = CONCAT('(min-hold)', LEFT(owner, 240)), expires_at = acquired_at + INTERVAL ? MICROSECOND, lock_delay_ms = 0
WHERE name = ? AND owner = ? AND token = ? AND acquired_at + INTERVAL ? MICROSECOND > UTC_TIMESTAMP(6))");
    // Many acquisitions, or many last-level releases, in one call of migration 0011's functions (one
    // statement, one transaction): the requests as one JSON parameter (MyLocks' requests_json),
    // the outcomes as the positions of those granted or deleted.
    acquire_many =
        make("acquire_many", "SET STATEMENT innodb_lock_wait_timeout = 1 FOR SELECT `{prefix}acquire_many`(?)");
    release_last_many = make("release_last_many", "SELECT `{prefix}release_last_many`(?)");
    history_table = fill(R"(
CREATE TABLE IF NOT EXISTS `{prefix}schema_history` (
  version      INT NOT NULL PRIMARY KEY,
  name         VARCHAR(255) NOT NULL,
  checksum     VARCHAR(64) NOT NULL,
  applied_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  applied_by   VARCHAR(512) NOT NULL,
  execution_ms BIGINT NOT NULL,
  success      BOOLEAN NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4)",
                         {{"{prefix}", prefix}});
  }

  // The held locks as a table: one JSON parameter, [[name, owner, token, ttl_us], ...], which
  // keeps 10,000 locks clear of the 65,535-placeholder limit.
  static constexpr std::string_view kHeldTable = R"(JSON_TABLE(?, '$[*]' COLUMNS (
  name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]',
  owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[1]',
  token BIGINT PATH '$[2]',
  ttl_us BIGINT PATH '$[3]',
  position FOR ORDINALITY)) h)";

  MyStatement acquire, release, release_last, renew, renew_asked, renew_one, renewed_of, lease_left, list,
      force_release, reap, reap_members, census, seed_expired, acquire_member, release_member, renew_members,
      lease_left_of_readers, mark_writer, unmark_writer, first_lease_end, schema_version, history, record_started,
      record_done, forget, grants, catalog, revoke, ask_release, asked_already, set_note, acknowledge_revoked,
      release_keeping, acquire_many, release_last_many;
  std::string history_table;
};

/// The numbers of one element of a list a function answers (a positions list, a turn), separated by single spaces;
/// `what` names the function in the error a malformed answer throws.
template <std::size_t N>
std::array<std::int64_t, N> parse_numbers(std::string_view element, std::string_view what) {
  auto malformed = [&] { return DatabaseError(fmt::format("{} answered a malformed list: '{}'", what, element)); };
  std::array<std::int64_t, N> values{};
  const char* at = element.data();
  const char* end = at + element.size();
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) {
      if (at == end || *at != ' ') throw malformed();
      ++at;
    }
    auto [next, error] = std::from_chars(at, end, values[i]);
    if (error != std::errc{}) throw malformed();
    at = next;
  }
  if (at != end) throw malformed();
  return values;
}

/// The rows of MySql::history.
[[nodiscard]] std::vector<AppliedMigration> parse_history(const MyRows& rows);
/// 'count token' from the acquire function: the grant, or empty for NULL (held by another owner).
[[nodiscard]] std::optional<Grant> parse_grant(const MyRows& rows);
/// acquire_many's "position count token,..." (positions from 0; '' when nothing was granted): one
/// outcome per request of a batch of `requests`. @throws DatabaseError for any other text.
[[nodiscard]] std::vector<std::optional<Grant>> parse_positions_with_grants(std::string_view text,
                                                                            std::size_t requests);
/// release_last_many's "position,...": true at each position given. @throws DatabaseError likewise.
[[nodiscard]] std::vector<bool> parse_positions(std::string_view text, std::size_t requests);

}  // namespace dblock::detail
