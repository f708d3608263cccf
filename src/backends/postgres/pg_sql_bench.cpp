// `dblock bench`'s: the hand-written floor and the rows its reaper scenario seeds.
#include "backends/postgres/pg_sql.hpp"

namespace dblock::detail {

PgBenchSql::PgBenchSql(const PgSqlText& fill) {
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
  seed_expired = fill(R"(
INSERT INTO "{schema}"."{prefix}locks" (name, owner, count, token, acquired_at, expires_at)
SELECT $1 || g, 'dblock-bench', 1, nextval('"{schema}"."{prefix}token_seq"'), clock_timestamp() - interval '2 s',
       clock_timestamp() - interval '1 s'
FROM generate_series(1, $2::bigint) g)");
}

}  // namespace dblock::detail
