// What operators and the reaper send: the listing, a forced release, revocation, reaping and the
// census.
#include "backends/postgres/pg_sql.hpp"

namespace dblock::detail {

PgAdminSql::PgAdminSql(StatementIds& ids, const PgSqlText& fill) {
  // One row per holder: a group's lock row stands for its members, listed instead. Each branch
  // is limited in its primary key's order, so the first rows of a big table are read by index
  // (8 ms instead of 700 ms for 1000 of 1,000,000 rows).
  list = {ids, fill(R"(
SELECT name, owner, count, token, remaining, kind, lock_delay_ms, held_for, note FROM (
  (SELECT name, owner, count, token, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint AS remaining,
          'exclusive' AS kind, lock_delay_ms,
          floor(extract(epoch FROM clock_timestamp() - acquired_at) * 1000)::bigint AS held_for,
          CASE WHEN note_token = token THEN coalesce(holder_note, '') ELSE '' END AS note
   FROM "{schema}"."{prefix}locks" WHERE ($1 = '' OR name = $1) AND owner NOT IN ('(permits)', '(readers)')
   ORDER BY name LIMIT $2::bigint)
  UNION ALL
  (SELECT m.name, m.owner, m.count, m.token, floor(extract(epoch FROM m.expires_at - clock_timestamp()) * 1000)::bigint,
          m.kind, 0, floor(extract(epoch FROM clock_timestamp() - m.acquired_at) * 1000)::bigint, ''
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
  // A request to let go (doc/semantics.md, "Asking a holder to let go"): the grant asked is the
  // row's token, which the holder's renewal compares (migration 0019).
  ask_release = {ids, fill(R"(
UPDATE "{schema}"."{prefix}locks" SET release_asked_token = token
WHERE name = $1 AND expires_at - lock_delay_ms * interval '1 millisecond' > clock_timestamp()
  AND owner NOT IN ('(permits)', '(readers)') AND owner NOT LIKE '(revoked)%' AND owner NOT LIKE '(min-hold)%'
RETURNING 1)")};
  // A holder's note, for its own grant (migration 0019).
  set_note = {ids, fill(R"(
UPDATE "{schema}"."{prefix}locks" SET holder_note = $4, note_token = token
WHERE name = $1 AND owner = $2 AND token = $3::bigint RETURNING 1)")};
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
       coalesce(floor(extract(epoch FROM clock_timestamp() - min(acquired_at) FILTER (WHERE expires_at > clock_timestamp())) * 1000), 0)::bigint,
       (SELECT count(*) FROM "{schema}"."{prefix}waiters" WHERE expires_at > clock_timestamp())
FROM "{schema}"."{prefix}locks")")};
}

}  // namespace dblock::detail
