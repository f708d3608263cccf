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
#include "base/sql_template.hpp"

namespace dblock::detail {

[[nodiscard]] std::int64_t to_int64(const PGresult* result, int row, int column);
[[nodiscard]] std::string text_of(const PGresult* result, int row, int column);
/// FNV-1a: a stable 32-bit namespace for this installation's advisory keys and channel name.
[[nodiscard]] std::int32_t installation_key(std::string_view schema, std::string_view prefix);
/// The rows of PgSql::history.
[[nodiscard]] std::vector<AppliedMigration> parse_history(const PGresult* result);

/// Every SQL statement of table mode, built once per store for its schema and prefix; the
/// prepared ones take their ids from the store's `ids`.
struct PgSql {
  PgSql(StatementIds& ids, std::string_view schema, std::string_view prefix, std::int32_t key,
        std::string_view channel) {
    auto key_text = std::to_string(key);
    auto timeout_text = std::to_string(kBatchLockTimeoutMs);
    auto fill = [&](std::string_view sql) {
      return detail::fill(sql, {{"{schema}", schema},
                                {"{prefix}", prefix},
                                {"{key}", key_text},
                                {"{channel}", channel},
                                {"{batch_lock_timeout_ms}", timeout_text}});
    };
    // The conflict branch of a grant, shared by `acquire` and `acquire_many` so that both decide
    // by the same rules; {held} is the caller's held token. The caller's own live row keeps the
    // later lease and the longer delay whether it is re-entered or taken over: a takeover (a
    // leftover, or an acquisition of this owner landing late) may find a guard of the owner
    // believing that row's lease, and must not end it sooner.
    auto granting = [&](std::string_view sql, std::string_view held) {
      return fill(detail::fill(
          detail::fill(detail::fill(detail::fill(sql, {{"{conflict}", R"(ON CONFLICT (name) DO UPDATE SET
  count         = CASE WHEN {reenter} THEN l.count + 1 ELSE 1 END,
  token         = CASE WHEN {reenter} THEN l.token ELSE EXCLUDED.token END,
  acquired_at   = CASE WHEN {reenter} THEN l.acquired_at ELSE EXCLUDED.acquired_at END,
  owner         = EXCLUDED.owner,
  expires_at    = CASE WHEN {own_live}
                       THEN greatest({lease_end}, EXCLUDED.expires_at - EXCLUDED.lock_delay_ms * interval '1 millisecond')
                            + greatest(l.lock_delay_ms, EXCLUDED.lock_delay_ms) * interval '1 millisecond'
                       ELSE EXCLUDED.expires_at END,
  lock_delay_ms = CASE WHEN {own_live} THEN greatest(l.lock_delay_ms, EXCLUDED.lock_delay_ms) ELSE EXCLUDED.lock_delay_ms END
WHERE {own_live} OR l.expires_at <= EXCLUDED.acquired_at)"}}),
                                    {{"{reenter}", "{own_live} AND l.token = {held}"}}),
                       {{"{own_live}", "(l.owner = EXCLUDED.owner AND {lease_end} > EXCLUDED.acquired_at)"}}),
          {{"{lease_end}", "(l.expires_at - l.lock_delay_ms * interval '1 millisecond')"}, {"{held}", held}}));
    };
    // Migration 0005's acquire_held as one statement (no PL/pgSQL call: less server CPU per grant):
    // the grants of one name are serialised by a transaction-level advisory lock on a 64-bit hash of
    // the name, taken before the clock is read and the token drawn, and held until the row is
    // committed, so tokens rise in grant order with one row version per grant
    // (doc/database-facts.md §1). The clock is read once: EXCLUDED.acquired_at carries it into the
    // conflict branch. Kept in step with the function by tests/postgres/acquire_forms_test.cpp.
    // Lock-delay (migration 0008): expires_at is when the name is free, the lease's end plus
    // $5 ms; the lease ({lease_end}) is what a re-entry, and a takeover of the caller's own row,
    // need live. Everyone else waits for expires_at, delay included.
    // As in acquire_many below, the NOT EXISTS refuses a name another owner holds live without
    // locking its row, so a try never waits on a row an application fence holds; the lock_timeout
    // bounds what is left to wait for (a fence past its lease, or the caller's own fence under a
    // re-entry): PgLocks answers busy on 55P03, and the combiner's other requests go on.
    acquire = {ids, granting(R"(
WITH bound AS (SELECT set_config('lock_timeout', '{batch_lock_timeout_ms}', true)),
     serial AS (SELECT pg_advisory_xact_lock(hashtextextended($1, 7310958615390432069)) FROM bound),
     c AS (SELECT clock_timestamp() AS now FROM serial)
INSERT INTO "{schema}"."{prefix}locks" AS l (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
SELECT $1, $2, 1, nextval('"{schema}"."{prefix}token_seq"'), c.now,
       c.now + ($3::bigint + $5::bigint) * interval '1 millisecond', $5::bigint FROM c
WHERE NOT EXISTS (SELECT FROM "{schema}"."{prefix}locks" o WHERE o.name = $1 AND o.owner <> $2 AND o.expires_at > c.now)
{conflict}
RETURNING l.count, l.token)",
                             "$4::bigint")};
    // `acquire` for many names in one statement and transaction (the core combines concurrent
    // callers). The arrays are in the caller's order of distinct names sorted by bytes; the grants
    // of each name stay in token order because every advisory key of the batch is taken, in
    // ascending order, before the clock is read and any token drawn (count(*) drains `serial`),
    // and rows are then upserted in name order (ORDER BY under the INSERT): keys ascending, then
    // rows by name, the order every statement that locks several rows keeps, so batches cannot
    // deadlock each other.
    // The NOT EXISTS refuses a name another owner holds live without writing or locking its row:
    // no token drawn, no WAL, and no wait on a row an application fence holds (its snapshot can
    // only be older than the truth, which refuses a caller a moment early, never grants wrongly:
    // ON CONFLICT re-reads the newest row). The lock_timeout, local to this transaction (nothing
    // stays on the session, as a transaction pooler needs), bounds how long one stuck name holds
    // up the others: 55P03 is transient and the core sends each request alone then.
    acquire_many = {ids, granting(R"(
WITH r AS (SELECT r.name COLLATE "C" AS name, r.owner, r.ttl_ms, r.held_token, r.delay_ms
           FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[])
                AS r(name, owner, ttl_ms, held_token, delay_ms)),
     bound AS (SELECT set_config('lock_timeout', '{batch_lock_timeout_ms}', true)),
     serial AS (SELECT pg_advisory_xact_lock(k.key)
                FROM (SELECT DISTINCT hashtextextended(r.name, 7310958615390432069) AS key FROM r, bound ORDER BY 1) k),
     c AS (SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM serial) s)
INSERT INTO "{schema}"."{prefix}locks" AS l (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
SELECT r.name, r.owner, 1, nextval('"{schema}"."{prefix}token_seq"'), c.now,
       c.now + (r.ttl_ms + r.delay_ms) * interval '1 millisecond', r.delay_ms
FROM r CROSS JOIN c
WHERE NOT EXISTS (SELECT FROM "{schema}"."{prefix}locks" o
                  WHERE o.name = r.name AND o.owner <> r.owner AND o.expires_at > c.now)
ORDER BY r.name
{conflict}
RETURNING l.name, l.count, l.token)",
                                  "(SELECT r.held_token FROM r WHERE r.name = EXCLUDED.name)")};
    // At zero the row is deleted; NOTIFY only when a waiter holds the shared advisory key
    // (then our exclusive try fails), so uncontended releases pay no notify cost.
    // Committed without waiting for the disk (doc/semantics.md, "Releases that do not wait for the
    // disk"): a release a crash forgets leaves the lock held until its lease ends, and whoever is
    // granted the name next commits durably, which makes this release durable first.
    auto deleted_and_notified = [&](std::string_view sql) {
      return fill(detail::fill(sql, {{"{notify_if_waited}", R"(CASE WHEN pg_try_advisory_xact_lock({key}, hashtext(d.name)) THEN 0
                        ELSE (SELECT 1 FROM pg_notify('{channel}', d.name)) END)"}}));
    };
    release = {ids, deleted_and_notified(R"(
WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),
     d AS (DELETE FROM "{schema}"."{prefix}locks" WHERE name = $1 AND owner = $2 AND token = $3::bigint AND count <= 1
           RETURNING name),
     u AS (UPDATE "{schema}"."{prefix}locks" SET count = count - 1
           WHERE name = $1 AND owner = $2 AND token = $3::bigint AND count > 1 RETURNING count)
SELECT 0::bigint, {notify_if_waited} FROM d, async
UNION ALL SELECT count::bigint, 0 FROM u, async)")};
    // The caller's last level (the core counts levels): the row goes whatever its count, so no
    // decrement branch is planned or run. A count above the caller's is a re-entry whose reply was
    // lost and which nobody holds; it would only keep the name blocked until the lease ends.
    // Asynchronous and notifying as `release`.
    release_last = {ids, deleted_and_notified(R"(
WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),
     d AS (DELETE FROM "{schema}"."{prefix}locks" WHERE name = $1 AND owner = $2 AND token = $3::bigint RETURNING name)
SELECT {notify_if_waited} FROM d, async)")};
    // `release_last` for many rows in one statement, as asynchronous and notifying. `v` locks the
    // rows in name order (the locking clause sits above the sort), so releases keep the lock order
    // of acquire_many; both `v` and `d` re-check owner and token on the newest row version, so a
    // row taken over meanwhile is left alone. Returns the names deleted.
    release_last_many = {ids, deleted_and_notified(R"(
WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),
     r AS (SELECT r.name COLLATE "C" AS name, r.owner, r.token
           FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(name, owner, token)),
     v AS (SELECT l.name FROM "{schema}"."{prefix}locks" l
           JOIN r ON l.name = r.name AND l.owner = r.owner AND l.token = r.token
           ORDER BY l.name FOR UPDATE OF l),
     d AS (DELETE FROM "{schema}"."{prefix}locks" l USING r
           WHERE l.name IN (SELECT v.name FROM v) AND l.name = r.name AND l.owner = r.owner AND l.token = r.token
           RETURNING l.name)
SELECT d.name, {notify_if_waited} FROM d, async)")};
    // The bench's hand-written floor: what a user would write without dblock (no stalled-insert
    // guard for tokens, no re-entry, no lost-reply handling, no wake-ups).
    hand_written_acquire = fill(R"(
INSERT INTO "{schema}"."{prefix}locks" AS l (name, owner, count, token, acquired_at, expires_at)
VALUES ($1, $2, 1, nextval('"{schema}"."{prefix}token_seq"'), now(), now() + $3::bigint * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, count = 1, token = EXCLUDED.token,
                                 acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= now()
RETURNING count, token)");
    hand_written_release = fill(R"(
DELETE FROM "{schema}"."{prefix}locks" WHERE name = $1 AND owner = $2 AND token = $3::bigint RETURNING 1)");
    hand_written_release_async = fill(R"(
WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM "{schema}"."{prefix}locks" WHERE name = $1 AND owner = $2 AND token = $3::bigint
  AND EXISTS (SELECT FROM async) RETURNING 1)");
    // Migration 0016: a renewal that never waits for a row another transaction holds (a fence);
    // such a row comes back as -(position + 1), busy, asked again soon.
    renew = {ids, fill(R"(
SELECT "{schema}"."{prefix}renew_held_or_busy"($1::text[], $2::text[], $3::bigint[], $4::bigint[]))")};
    lease_left = {ids, fill(R"(
SELECT floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM "{schema}"."{prefix}locks" WHERE name = $1)")};
    // One row per holder: a group's lock row stands for its members, listed instead. Each branch
    // is limited in its primary key's order, so the first rows of a big table are read by index
    // (8 ms instead of 700 ms for 1000 of 1,000,000 rows).
    list = {ids, fill(R"(
SELECT name, owner, count, token, remaining, kind, lock_delay_ms, held_for FROM (
  (SELECT name, owner, count, token, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint AS remaining,
          'exclusive' AS kind, lock_delay_ms,
          floor(extract(epoch FROM clock_timestamp() - acquired_at) * 1000)::bigint AS held_for
   FROM "{schema}"."{prefix}locks" WHERE ($1 = '' OR name = $1) AND owner NOT IN ('(permits)', '(readers)')
   ORDER BY name LIMIT $2::bigint)
  UNION ALL
  (SELECT m.name, m.owner, m.count, m.token, floor(extract(epoch FROM m.expires_at - clock_timestamp()) * 1000)::bigint,
          m.kind, 0, floor(extract(epoch FROM clock_timestamp() - m.acquired_at) * 1000)::bigint
   FROM "{schema}"."{prefix}holders" m JOIN "{schema}"."{prefix}locks" l
     ON l.name = m.name AND l.token = m.epoch AND l.owner = CASE m.kind WHEN 'permit' THEN '(permits)' ELSE '(readers)' END
   WHERE ($1 = '' OR m.name = $1) AND m.kind <> 'writer' ORDER BY m.name, m.owner LIMIT $2::bigint)) AS holders
ORDER BY name, owner LIMIT $2::bigint)")};
    force_release = {ids, fill(R"(
WITH d AS (DELETE FROM "{schema}"."{prefix}locks" WHERE name = $1 RETURNING name)
SELECT (SELECT 1 FROM pg_notify('{channel}', d.name)) FROM d)")};
    // Revocation (doc/semantics.md, "Revocation"): the owner becomes one no holder has, lease and
    // token stay, so the name is free only at the lease's end or at the holder's acknowledgement.
    revoke = {ids, fill(R"(
UPDATE "{schema}"."{prefix}locks" SET owner = '(revoked)' || left(owner, 240)
WHERE name = $1 AND expires_at > clock_timestamp() AND owner NOT LIKE '(revoked)%' AND owner NOT LIKE '(min-hold)%'
RETURNING 1)")};
    // Asynchronous and notifying as a release: it is one, by the holder that lost the row.
    acknowledge_revoked = {ids, deleted_and_notified(R"(
WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),
     d AS (DELETE FROM "{schema}"."{prefix}locks"
           WHERE name = $1 AND owner = '(revoked)' || left($2, 240) AND token = $3::bigint RETURNING name)
SELECT {notify_if_waited} FROM d, async)")};
    // Durable, unlike a release: a crash that forgot it would give the name back before its minimum
    // hold (the row would return with the holder's lease, which nobody renews).
    release_keeping = {ids, fill(R"(
UPDATE "{schema}"."{prefix}locks"
SET owner = '(min-hold)' || left(owner, 240), expires_at = acquired_at + $4::bigint * interval '1 millisecond',
    lock_delay_ms = 0
WHERE name = $1 AND owner = $2 AND token = $3::bigint
  AND acquired_at + $4::bigint * interval '1 millisecond' > clock_timestamp()
RETURNING 1)")};
    // SKIP LOCKED: concurrent reapers and acquirers never wait for each other. The row lock is
    // taken on the newest row version and the expiry re-checked there, so a row an acquirer has
    // just taken over or renewed is left alone.
    // Committed without waiting for the disk, like a release: a reap a crash forgets leaves rows
    // whose leases have ended, which the next reap deletes.
    reap = {ids, fill(R"(
WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),
     victim AS (SELECT name FROM "{schema}"."{prefix}locks" WHERE expires_at <= clock_timestamp()
                ORDER BY expires_at LIMIT $1::bigint FOR UPDATE SKIP LOCKED),
     gone AS (DELETE FROM "{schema}"."{prefix}locks" l USING victim v
              WHERE l.name = v.name AND l.expires_at <= clock_timestamp() RETURNING 1),
     lapsed AS (SELECT name, owner, kind FROM "{schema}"."{prefix}holders" WHERE expires_at <= clock_timestamp()
                ORDER BY expires_at LIMIT $1::bigint FOR UPDATE SKIP LOCKED),
     members AS (DELETE FROM "{schema}"."{prefix}holders" m USING lapsed v
                 WHERE m.name = v.name AND m.owner = v.owner AND m.kind = v.kind AND m.expires_at <= clock_timestamp()
                 RETURNING 1)
SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM members) FROM async)")};
    census = {ids, fill(R"(
SELECT count(*) FILTER (WHERE expires_at > clock_timestamp()),
       count(*) FILTER (WHERE expires_at <= clock_timestamp()),
       coalesce(floor(extract(epoch FROM clock_timestamp() - min(acquired_at) FILTER (WHERE expires_at > clock_timestamp())) * 1000), 0)::bigint
FROM "{schema}"."{prefix}locks")")};
    acquire_member = {ids, fill(R"(
SELECT lock_count, lock_token FROM "{schema}"."{prefix}acquire_member"($1, $2, $3, $4::bigint, $5::bigint, $6::bigint))")};
    // As release: NOTIFY when a member left and someone waits.
    release_member = {ids, fill(R"(
SELECT r.lock_count::bigint,
       CASE WHEN r.freed AND NOT pg_try_advisory_xact_lock({key}, hashtext($1)) THEN (SELECT 1 FROM pg_notify('{channel}', $1))
            ELSE 0 END
FROM "{schema}"."{prefix}release_member"($1, $2, $3, $4::bigint) AS r)")};
    // Migration 0016: as `renew`, for memberships (a member's fence share-locks its group's row).
    renew_members = {ids, fill(R"(
SELECT "{schema}"."{prefix}renew_members_or_busy"($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]))")};
    // The mark is written only while readers hold the name: other waits stay read-only.
    lease_left_marking_writer = {ids, fill(R"(
WITH l AS (SELECT owner, expires_at FROM "{schema}"."{prefix}locks" WHERE name = $1),
     mark AS (INSERT INTO "{schema}"."{prefix}holders" (name, owner, kind, count, token, epoch, acquired_at, expires_at)
              SELECT $1, $2, 'writer', 0, 0, 0, clock_timestamp(), clock_timestamp() + $3::bigint * interval '1 millisecond'
              FROM l WHERE l.owner = '(readers)' AND l.expires_at > clock_timestamp()
              ON CONFLICT (name, owner, kind) DO UPDATE SET expires_at = EXCLUDED.expires_at
              RETURNING 1)
SELECT floor(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000)::bigint, (SELECT count(*) FROM mark) FROM l)")};
    first_lease_end = {ids, fill(R"(
SELECT floor(extract(epoch FROM coalesce(
         (SELECT min(m.expires_at) FROM "{schema}"."{prefix}holders" m
          WHERE l.owner = '(permits)' AND m.name = l.name AND m.kind = 'permit' AND m.epoch = l.token
            AND m.expires_at > clock_timestamp()),
         l.expires_at) - clock_timestamp()) * 1000)::bigint
FROM "{schema}"."{prefix}locks" l WHERE l.name = $1)")};
    unmark_writer = {ids, fill(R"(
DELETE FROM "{schema}"."{prefix}holders" WHERE name = $1 AND owner = $2 AND kind = 'writer')")};
    seed_expired = fill(R"(
INSERT INTO "{schema}"."{prefix}locks" (name, owner, count, token, acquired_at, expires_at)
SELECT $1 || g, 'dblock-bench', 1, nextval('"{schema}"."{prefix}token_seq"'), clock_timestamp() - interval '2 s',
       clock_timestamp() - interval '1 s'
FROM generate_series(1, $2::bigint) g)");
    schema_version = fill(R"(SELECT coalesce(max(version), 0) FROM "{schema}"."{prefix}schema_history" WHERE success)");
    history_table = fill(R"(
CREATE TABLE IF NOT EXISTS "{schema}"."{prefix}schema_history" (
  version      integer PRIMARY KEY,
  name         text NOT NULL,
  checksum     text NOT NULL,
  applied_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  applied_by   text NOT NULL,
  execution_ms bigint NOT NULL,
  success      boolean NOT NULL
))");
    history = fill(R"(SELECT version, name, checksum, success FROM "{schema}"."{prefix}schema_history" ORDER BY version)");
    record = fill(R"(INSERT INTO "{schema}"."{prefix}schema_history" (version, name, checksum, applied_by, execution_ms, success)
VALUES ($1::integer, $2, $3, $4, $5::bigint, true))");
    forget = fill(R"(DELETE FROM "{schema}"."{prefix}schema_history" WHERE version = $1::integer)");
    migration_lock = fill("SELECT pg_try_advisory_lock({key}, hashtext('dblock:migrate'))");
    migration_xact_lock = fill("SELECT pg_try_advisory_xact_lock({key}, hashtext('dblock:migrate'))");
    migration_lock_blocking = fill("SELECT pg_advisory_lock({key}, hashtext('dblock:migrate'))");
    migration_unlock = fill("SELECT pg_advisory_unlock({key}, hashtext('dblock:migrate'))");
    create_schema = fill(R"(CREATE SCHEMA IF NOT EXISTS "{schema}")");
    // USAGE and CREATE on the schema (CREATE on the database when the schema is to be created),
    // SELECT and INSERT on an existing history, ownership of what is re-defined ($2).
    migration_rights = fill(R"(
SELECT format('CREATE on database %I (to create schema %I)', current_database(), $1::text)
WHERE NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AND NOT has_database_privilege(current_database(), 'CREATE')
UNION ALL
SELECT format('%s on schema %I', p.priv, n.nspname) FROM pg_namespace n, unnest(ARRAY['USAGE', 'CREATE']) p(priv)
WHERE n.nspname = $1 AND NOT has_schema_privilege(n.oid, p.priv)
UNION ALL
SELECT format('%s on table %I.%I', p.priv, n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, unnest(ARRAY['SELECT', 'INSERT']) p(priv)
WHERE n.nspname = $1 AND c.relname = '{prefix}schema_history' AND NOT has_table_privilege(c.oid, p.priv)
UNION ALL
SELECT format('ownership of %s %I.%I (owned by %I)', CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index' ELSE 'table' END,
              n.nspname, c.relname, pg_get_userbyid(c.relowner))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[]) AND c.relname <> '{prefix}schema_history'
  AND NOT pg_has_role(c.relowner, 'USAGE')
UNION ALL
SELECT format('ownership of function %I.%I (owned by %I)', n.nspname, p.proname, pg_get_userbyid(p.proowner))
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = ANY ($2::text[]) AND NOT pg_has_role(p.proowner, 'USAGE'))");
    catalog = fill(R"(
SELECT c.relname,
       CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index'
                      WHEN 'I' THEN 'index' WHEN 'v' THEN 'view' WHEN 'm' THEN 'view' ELSE 'other' END,
       coalesce((SELECT t.relname FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid WHERE x.indexrelid = c.oid), ''),
       CASE WHEN c.relkind IN ('i', 'I') THEN
         coalesce((SELECT string_agg(a.attname, ',' ORDER BY k.position) FROM pg_index x
                   CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, position)
                   JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
                   WHERE x.indexrelid = c.oid), '')
       ELSE coalesce((SELECT string_agg(a.attname, ',' ORDER BY a.attnum) FROM pg_attribute a
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p')), '') END,
       '',
       coalesce((SELECT string_agg(format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
                                   || coalesce((SELECT ' collate ' || l.collname FROM pg_collation l
                                                WHERE l.oid = a.attcollation AND l.collname <> 'default'), ''),
                                   ',' ORDER BY a.attnum) FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p')), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[])
UNION ALL
SELECT p.proname, CASE p.prokind WHEN 'p' THEN 'procedure' WHEN 'f' THEN 'function' ELSE 'other' END, '', '', p.prosrc, ''
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = ANY ($2::text[])
UNION ALL
SELECT t.typname, 'other', '', '', '', '' FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = $1 AND t.typname = ANY ($2::text[]) AND t.typtype IN ('c', 'd', 'e', 'r')
  AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c')
ORDER BY 2, 1)");
  }

  /// How long an acquisition statement may wait for a lock before it gives way (55P03; a combined
  /// one as a whole): well below deadlock_timeout (1 s), so in a cycle with an application's
  /// fenced transaction the batch, not the application, is the one that yields.
  static constexpr int kBatchLockTimeoutMs = 200;

  PgStatement acquire, acquire_many, release, release_last, release_last_many;
  PgStatement renew, lease_left, list, force_release, reap, census;
  PgStatement revoke, acknowledge_revoked, release_keeping;
  PgStatement acquire_member, release_member, renew_members, lease_left_marking_writer, unmark_writer, first_lease_end;
  std::string hand_written_acquire, hand_written_release, hand_written_release_async;
  std::string seed_expired, schema_version, history_table, history, record, forget, migration_lock, migration_xact_lock,
      migration_lock_blocking,
      migration_unlock, create_schema, migration_rights, catalog;
};

}  // namespace dblock::detail
