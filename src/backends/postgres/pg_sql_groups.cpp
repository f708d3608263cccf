// Semaphores' and reader-writer locks' statements: memberships taken, released and renewed, and a
// waiting writer's mark.
#include "backends/postgres/pg_sql.hpp"

namespace dblock::detail {

PgGroupSql::PgGroupSql(StatementIds& ids, const PgSqlText& fill) {
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
}

}  // namespace dblock::detail
