// The fair queue's statements (migration 0017, doc/fair-queue.md): a waiter's turn, its read-only
// look, its leave, the release that hands the name on, the reaper's delete of dead waiters, the
// operators' listing, and the wait graph in which deadlocks are found.
#include "backends/postgres/pg_sql.hpp"

namespace dblock::detail {

PgQueueSql::PgQueueSql(StatementIds& ids, const PgSqlText& fill) {
  take_turn = {ids, fill(R"(
SELECT waiter_seq, lock_count, lock_token, left_ms
FROM "{schema}"."{prefix}wait_turn"($1, $2, $3::bigint, $4::bigint, $5::bigint))")};
  // One snapshot: a hand-off that committed shows as the waiter's row gone and the grant there.
  look = {ids, fill(R"(
SELECT EXISTS (SELECT FROM "{schema}"."{prefix}waiters" w WHERE w.name = $1 AND w.seq = $3::bigint AND w.owner = $2),
       coalesce(l.count, 0), coalesce(l.token, 0),
       coalesce(floor(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000)::bigint, 0),
       coalesce((SELECT floor(extract(epoch FROM h.expires_at - clock_timestamp()) * 1000)::bigint
                 FROM "{schema}"."{prefix}locks" h WHERE h.name = $1), 0)
FROM (SELECT 1) AS one
LEFT JOIN "{schema}"."{prefix}locks" l ON l.name = $1 AND l.owner = $2 AND l.expires_at > clock_timestamp())")};
  // The hand-off locks the row it grants (FOR UPDATE): a leave waits for it and then finds the
  // row gone, or deletes it first and the hand-off passes to the next waiter.
  leave = {ids, fill(R"(
DELETE FROM "{schema}"."{prefix}waiters" WHERE name = $1 AND owner = $2 AND seq = $3::bigint RETURNING 1)")};
  // Migration 0020's release: its grant also names the waiter on the grant channel.
  release_granting = {ids, fill(R"(
SELECT granted_owner
FROM "{schema}"."{prefix}release_granting"($1, $2, $3::bigint, $4, {key}, '{channel}', '{grant_channel}'))")};
  // SKIP LOCKED: a waiter row a hand-off or a leave is working on is left for the next round.
  reap_waiters = {ids, fill(R"(
WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),
     victim AS (SELECT w.name, w.seq FROM "{schema}"."{prefix}waiters" w WHERE w.expires_at <= clock_timestamp()
                ORDER BY w.expires_at LIMIT $1::bigint FOR UPDATE SKIP LOCKED),
     gone AS (DELETE FROM "{schema}"."{prefix}waiters" w USING victim v
              WHERE w.name = v.name AND w.seq = v.seq AND w.expires_at <= clock_timestamp() RETURNING 1)
SELECT count(*) FROM gone, async)")};
  waiter_rows = {ids, fill(R"(SELECT count(*) FROM "{schema}"."{prefix}waiters" WHERE name = $1)")};
  // The position counts live waiters only: a dead one is skipped by the hand-off, so it is no one's turn.
  list_waiters = {ids, fill(R"(
WITH now AS (SELECT clock_timestamp() AS t)
SELECT q.name, q.owner, q.kind, q.position, q.waited_ms
FROM (SELECT w.name, w.seq, w.owner, w.kind, row_number() OVER (PARTITION BY w.name ORDER BY w.seq) AS position,
             floor(extract(epoch FROM now.t - w.queued_at) * 1000)::bigint AS waited_ms
      FROM "{schema}"."{prefix}waiters" w, now WHERE w.expires_at > now.t) q
ORDER BY q.name, q.seq LIMIT $1::bigint)")};
  place = {ids, fill(R"(
SELECT CASE WHEN bool_or(w.seq = $2::bigint) THEN count(*) ELSE 0 END
FROM "{schema}"."{prefix}waiters" w WHERE w.name = $1 AND w.seq <= $2::bigint AND w.expires_at > clock_timestamp())")};
  wait_edges = {ids, fill(R"(
WITH now AS (SELECT clock_timestamp() AS t)
SELECT w.owner, w.name, l.owner, w.seq
FROM now, "{schema}"."{prefix}waiters" w
JOIN "{schema}"."{prefix}locks" l ON l.name = w.name
WHERE w.kind = 'exclusive' AND w.expires_at > now.t AND l.expires_at > now.t
ORDER BY w.seq LIMIT $1::bigint)")};
}

}  // namespace dblock::detail
