#pragma once
// Every SQL statement SQLite's table mode and migrations run, built once per store for its prefix.

#include <string>
#include <string_view>

#include "base/sql_template.hpp"

namespace dblock::detail {

// SQLite's clock in epoch milliseconds; exact, unlike the julianday() form (1 ms low).
inline constexpr std::string_view kNow =
    "(CAST(strftime('%s','now') AS INTEGER) * 1000 + CAST(substr(strftime('%f','now'), 4) AS INTEGER))";

/// The test clock's form (dblock::testing): a function each session defines (SqliteSession).
inline constexpr std::string_view kTestNow = "dblock_now()";

inline constexpr int kSqliteBusy = 5;
inline constexpr int kSqliteLocked = 6;
inline constexpr int kSqliteIoErr = 10;

/// The statements of groups (semaphores' permits, readers, waiting writers; migration 0004), run
/// inside one IMMEDIATE transaction per operation, all with the clock read once (:now). A name
/// appears once per statement (SOCI binds each name once): :now2 repeats :now.
struct SqliteGroupSql {
  /// `clock`: the SQL that reads the time (kNow, or kTestNow under dblock::testing).
  explicit SqliteGroupSql(std::string_view prefix, std::string_view clock = kNow) {
    auto fill = [&](std::string_view sql) { return detail::fill(sql, {{"{prefix}", prefix}, {"{now}", clock}}); };
    now = fill("SELECT {now}");
    lock_row = fill(R"(SELECT owner, token, expires_at FROM "{prefix}locks" WHERE name = :name)");
    member = fill(R"(
SELECT count, token, epoch, expires_at FROM "{prefix}holders" WHERE name = :name AND owner = :owner AND kind = :kind)");
    reenter = fill(R"(
UPDATE "{prefix}holders" SET count = count + 1, expires_at = max(expires_at, :expires)
WHERE name = :name AND owner = :owner AND kind = :kind)");
    stretch_group = fill(R"(UPDATE "{prefix}locks" SET expires_at = max(expires_at, :expires) WHERE name = :name)");
    live_permits = fill(R"(
SELECT count(*) FROM "{prefix}holders"
WHERE name = :name AND kind = 'permit' AND epoch = :epoch AND expires_at > :now AND owner <> :owner)");
    writer_waits = fill(R"(
SELECT count(*) FROM "{prefix}holders" WHERE name = :name AND kind = 'writer' AND expires_at > :now AND owner <> :owner)");
    next_token = fill(R"(UPDATE "{prefix}token_counter" SET value = value + 1 WHERE id = 1 RETURNING value)");
    join_group = fill(R"(
UPDATE "{prefix}locks" SET count = count + 1, expires_at = max(expires_at, :expires) WHERE name = :name)");
    start_group = fill(R"(
INSERT OR REPLACE INTO "{prefix}locks" (name, owner, count, token, acquired_at, expires_at)
VALUES (:name, :owner, 1, :token, :now, :expires))");
    forget_old_members = fill(R"(DELETE FROM "{prefix}holders" WHERE name = :name AND kind <> 'writer')");
    // The owner's own membership taken afresh keeps the later lease: a guard may still believe the
    // row's; a reader's (its own row of the same group: same token) also adds a level to the count
    // its unreleased levels still need (migrations/postgres/0012 says why).
    put_member = fill(R"(
INSERT INTO "{prefix}holders" (name, owner, kind, count, token, epoch, acquired_at, expires_at)
VALUES (:name, :owner, :kind, 1, :token, :epoch, :now, :expires)
ON CONFLICT (name, owner, kind) DO UPDATE SET count = CASE WHEN token = excluded.token THEN count + 1 ELSE 1 END,
  token = excluded.token, epoch = excluded.epoch,
  acquired_at = excluded.acquired_at, expires_at = max(expires_at, excluded.expires_at))");
    member_by_token = fill(R"(
SELECT count, epoch FROM "{prefix}holders" WHERE name = :name AND owner = :owner AND kind = :kind AND token = :token)");
    set_member_count = fill(R"(
UPDATE "{prefix}holders" SET count = :count WHERE name = :name AND owner = :owner AND kind = :kind)");
    drop_member = fill(R"(DELETE FROM "{prefix}holders" WHERE name = :name AND owner = :owner AND kind = :kind)");
    live_members = fill(R"(
SELECT count(*), coalesce(max(expires_at), 0) FROM "{prefix}holders"
WHERE name = :name AND kind = :kind AND epoch = :epoch AND expires_at > :now)");
    end_group = fill(R"(DELETE FROM "{prefix}locks" WHERE name = :name)");
    shrink_group = fill(R"(UPDATE "{prefix}locks" SET count = :count, expires_at = :expires WHERE name = :name)");
    renew_member = fill(R"(
UPDATE "{prefix}holders" SET expires_at = max(expires_at, :expires)
WHERE name = :name AND owner = :owner AND kind = :kind AND token = :token AND expires_at > :now
  AND EXISTS (SELECT 1 FROM "{prefix}locks" l WHERE l.name = "{prefix}holders".name AND l.token = "{prefix}holders".epoch
              AND l.owner = :group AND l.expires_at > :now2)
RETURNING expires_at)");
    mark_writer = fill(R"(
INSERT INTO "{prefix}holders" (name, owner, kind, count, token, epoch, acquired_at, expires_at)
VALUES (:name, :owner, 'writer', 0, 0, 0, :now, :expires)
ON CONFLICT (name, owner, kind) DO UPDATE SET expires_at = excluded.expires_at)");
    unmark_writer = fill(R"(DELETE FROM "{prefix}holders" WHERE name = :name AND owner = :owner AND kind = 'writer')");
    first_lease_end = fill(R"(
SELECT coalesce((SELECT min(m.expires_at) FROM "{prefix}holders" m
                 WHERE l.owner = '(permits)' AND m.name = l.name AND m.kind = 'permit' AND m.epoch = l.token
                   AND m.expires_at > :now),
                l.expires_at) - :now2
FROM "{prefix}locks" l WHERE l.name = :name)");
  }

  std::string now, lock_row, member, reenter, stretch_group, live_permits, writer_waits, next_token, join_group,
      start_group, forget_old_members, put_member, member_by_token, set_member_count, drop_member, live_members,
      end_group, shrink_group, renew_member, mark_writer, unmark_writer, first_lease_end;
};

struct SqliteSql {
  /// `clock`: the SQL that reads the time (kNow, or kTestNow under dblock::testing).
  explicit SqliteSql(std::string_view prefix, std::string_view clock = kNow) : groups(prefix, clock), now(clock) {
    auto fill = [&](std::string_view sql) { return detail::fill(sql, {{"{prefix}", prefix}, {"{now}", clock}}); };
    // A re-entry needs the token of the grant the caller holds (:held, 0 for none): a live row of
    // the caller's with another token is a leftover it no longer counts, taken over afresh, but
    // keeping the later lease and the longer delay as a re-entry does (PgSql's acquire explains why).
    // Lock-delay (migration 0008; PgSql's acquire explains it): expires_at is when the name is
    // free, the lease's end plus lock_delay_ms; re-entries and the caller's own takeovers need the
    // lease live.
    acquire = detail::fill(detail::fill(detail::fill(fill(R"(
INSERT INTO "{prefix}locks" AS l (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
VALUES (:name, :owner, 1, (SELECT value + 1 FROM "{prefix}token_counter" WHERE id = 1), {now}, {now} + :ttl + :delay,
        :delay)
ON CONFLICT (name) DO UPDATE SET
  count         = CASE WHEN {reenter} THEN l.count + 1 ELSE 1 END,
  token         = CASE WHEN {reenter} THEN l.token ELSE excluded.token END,
  acquired_at   = CASE WHEN {reenter} THEN l.acquired_at ELSE excluded.acquired_at END,
  owner         = excluded.owner,
  expires_at    = CASE WHEN {own_live}
                       THEN max({lease_end}, excluded.expires_at - excluded.lock_delay_ms)
                            + max(l.lock_delay_ms, excluded.lock_delay_ms)
                       ELSE excluded.expires_at END,
  lock_delay_ms = CASE WHEN {own_live} THEN max(l.lock_delay_ms, excluded.lock_delay_ms) ELSE excluded.lock_delay_ms END
WHERE {own_live} OR l.expires_at <= {now}
RETURNING count, token)"),
                                                     {{"{reenter}", "{own_live} AND l.token = :held"}}),
                                        {{"{own_live}", "(l.owner = excluded.owner AND {lease_end} > {now})"}}),
                           {{"{lease_end}", "(l.expires_at - l.lock_delay_ms)"}, {"{now}", clock}});
    // The caller's last level: the row goes whatever its count (LockBackend::release_last).
    release_last = fill(R"(
DELETE FROM "{prefix}locks" WHERE name = :name AND owner = :owner AND token = :token RETURNING 0)");
    release_at_one = fill(R"(
DELETE FROM "{prefix}locks" WHERE name = :name AND owner = :owner AND token = :token AND count = 1 RETURNING 0)");
    release_inner = fill(R"(
UPDATE "{prefix}locks" SET count = count - 1
WHERE name = :name AND owner = :owner AND token = :token AND count > 1 RETURNING count)");
    // A lease is live until expires_at - lock_delay_ms; a renewal keeps the delay after it.
    renew = fill(R"(
UPDATE "{prefix}locks" SET expires_at = max(expires_at, {now} + h.ttl + lock_delay_ms)
FROM (SELECT value ->> 0 AS name, value ->> 1 AS owner, value ->> 2 AS token, value ->> 3 AS ttl
      FROM json_each(:held)) AS h
WHERE "{prefix}locks".name = h.name AND "{prefix}locks".owner = h.owner AND "{prefix}locks".token = h.token
  AND "{prefix}locks".expires_at - "{prefix}locks".lock_delay_ms > {now}
RETURNING name, owner, token, coalesce(release_asked_token = token, 0))");
    lease_left = fill(R"(SELECT expires_at - {now} FROM "{prefix}locks" WHERE name = :name)");
    // One row per holder: a group's lock row stands for its members, listed instead.
    list = fill(R"(
SELECT name, owner, count, token, remaining, kind, lock_delay_ms, held_for, note FROM (
  SELECT name, owner, count, token, expires_at - {now} AS remaining, 'exclusive' AS kind, lock_delay_ms,
         {now} - acquired_at AS held_for,
         CASE WHEN note_token = token THEN coalesce(holder_note, '') ELSE '' END AS note
  FROM "{prefix}locks" WHERE (:name = '' OR name = :name2) AND owner NOT IN ('(permits)', '(readers)')
  UNION ALL
  SELECT m.name, m.owner, m.count, m.token, m.expires_at - {now}, m.kind, 0, {now} - m.acquired_at, ''
  FROM "{prefix}holders" m JOIN "{prefix}locks" l
    ON l.name = m.name AND l.token = m.epoch AND l.owner = CASE m.kind WHEN 'permit' THEN '(permits)' ELSE '(readers)' END
  WHERE (:name3 = '' OR m.name = :name4) AND m.kind <> 'writer')
ORDER BY name, owner LIMIT :limit)");
    force_release = fill(R"(DELETE FROM "{prefix}locks" WHERE name = :name RETURNING name)");
    // Revocation, its acknowledgement and the minimum hold: as PgSql's.
    revoke = fill(R"(
UPDATE "{prefix}locks" SET owner = '(revoked)' || substr(owner, 1, 240)
WHERE name = :name AND expires_at > {now} AND owner NOT LIKE '(revoked)%' AND owner NOT LIKE '(min-hold)%'
RETURNING name)");
    // A request to let go: the grant asked is the row's token (migration 0019). A RETURNING row
    // also when it was asked before, so an ask sent twice is answered alike.
    // A holder's note, for its own grant (migration 0019).
    set_note = fill(R"(
UPDATE "{prefix}locks" SET holder_note = :note, note_token = token WHERE name = :name AND owner = :owner AND token = :token
RETURNING name)");
    ask_release = fill(R"(
UPDATE "{prefix}locks" SET release_asked_token = token
WHERE name = :name AND expires_at - lock_delay_ms > {now}
  AND owner NOT IN ('(permits)', '(readers)') AND owner NOT LIKE '(revoked)%' AND owner NOT LIKE '(min-hold)%'
RETURNING name)");
    acknowledge_revoked = fill(R"(
DELETE FROM "{prefix}locks" WHERE name = :name AND owner = '(revoked)' || substr(:owner, 1, 240) AND token = :token
RETURNING name)");
    release_keeping = fill(R"(
UPDATE "{prefix}locks" SET owner = '(min-hold)' || substr(owner, 1, 240), expires_at = acquired_at + :hold,
                           lock_delay_ms = 0
WHERE name = :name AND owner = :owner AND token = :token AND acquired_at + :hold2 > {now}
RETURNING name)");
    // One statement: SQLite serialises writers, so the expiry re-check sees any takeover.
    reap = fill(R"(
DELETE FROM "{prefix}locks" WHERE name IN (SELECT name FROM "{prefix}locks" WHERE expires_at <= {now}
                                           ORDER BY expires_at LIMIT :batch)
  AND expires_at <= {now}
RETURNING name)");
    reap_members = fill(R"(
DELETE FROM "{prefix}holders" WHERE rowid IN (SELECT rowid FROM "{prefix}holders" WHERE expires_at <= {now}
                                              ORDER BY expires_at LIMIT :batch)
RETURNING name)");
    census = fill(R"(
SELECT coalesce(sum(expires_at > {now}), 0), coalesce(sum(expires_at <= {now}), 0),
       coalesce({now} - min(CASE WHEN expires_at > {now} THEN acquired_at END), 0),
       (SELECT count(*) FROM "{prefix}waiters" WHERE expires_at > {now})
FROM "{prefix}locks")");
    seed_expired = fill(R"(
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < :count)
INSERT INTO "{prefix}locks" (name, owner, count, token, acquired_at, expires_at)
SELECT :stem || i, 'dblock-bench', 1, (SELECT value FROM "{prefix}token_counter") + i, {now} - 2000, {now} - 1000
FROM g)");
    schema_version = fill(R"(SELECT coalesce(max(version), 0) FROM "{prefix}schema_history" WHERE success)");
    history_table = fill(R"(
CREATE TABLE IF NOT EXISTS "{prefix}schema_history" (
  version      INTEGER PRIMARY KEY,
  name         TEXT NOT NULL,
  checksum     TEXT NOT NULL,
  applied_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  applied_by   TEXT NOT NULL,
  execution_ms INTEGER NOT NULL,
  success      INTEGER NOT NULL
))");
    history = fill(R"(SELECT version, name, checksum, success FROM "{prefix}schema_history" ORDER BY version)");
    record = fill(R"(
INSERT INTO "{prefix}schema_history" (version, name, checksum, applied_by, execution_ms, success)
VALUES (:version, :name, :checksum, :applied_by, :execution_ms, 1))");
    forget = fill(R"(DELETE FROM "{prefix}schema_history" WHERE version = :version)");
  }

  std::string acquire, release_last, release_at_one, release_inner, renew, lease_left, list, force_release, reap,
      reap_members, census;
  std::string revoke, ask_release, set_note, acknowledge_revoked, release_keeping;
  std::string seed_expired, schema_version, history_table, history, record, forget;
  SqliteGroupSql groups;
  std::string_view now;  // the clock's SQL, for the roles that build statements of their own
};

}  // namespace dblock::detail
