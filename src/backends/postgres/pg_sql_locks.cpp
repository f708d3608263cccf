// A lock's own statements: grants (one name or a combined batch), releases, renewals, its lease,
// and the two ends a revoked or minimum-held row has.
#include "backends/postgres/pg_sql.hpp"
#include "base/sql_template.hpp"

namespace dblock::detail {

// Long by design: one statement's text per member, each with the reasoning it rests on; no logic.
PgLockSql::PgLockSql(StatementIds& ids, const PgSqlText& fill) {
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
  auto deleted_and_notified = [&](std::string_view sql) {
    return fill(
        detail::fill(sql, {{"{notify_if_waited}", R"(CASE WHEN pg_try_advisory_xact_lock({key}, hashtext(d.name)) THEN 0
                        ELSE (SELECT 1 FROM pg_notify('{channel}', d.name)) END)"}}));
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
  // Migration 0016: a renewal that never waits for a row another transaction holds (a fence);
  // such a row comes back as -(position + 1), busy, asked again soon. Migration 0019: each row
  // renewed says whether its grant was asked to let go.
  renew = {ids, fill(R"(
SELECT * FROM "{schema}"."{prefix}renew_held_noting_asks"($1::text[], $2::text[], $3::bigint[], $4::bigint[]))")};
  lease_left = {ids, fill(R"(
SELECT floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM "{schema}"."{prefix}locks" WHERE name = $1)")};
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
}

}  // namespace dblock::detail
