-- dblock schema version 19: a holder can be asked to let go (doc/semantics.md, "Asking a holder to
-- let go"). Store::request_release (`dblock release --ask`, the sidecar's POST
-- /api/request-release) writes the asked grant's token into release_asked_token; the ask stands for
-- that grant only, so a later grant of the name (a new token) is not asked, and nothing has to clear
-- the column. The holder learns of it from its next renewal: renew_held_noting_asks renews as
-- renew_held_or_busy (migration 0016) does and says, per lock renewed, whether its grant was asked.
-- renew_held_or_busy stays, for libraries of schema 16 to 18 during an upgrade. Adding a nullable
-- column without a default rewrites nothing. New function: no new grant beyond EXECUTE, which PUBLIC
-- has by default (`dblock migrate grants` lists it).
ALTER TABLE "{schema}"."{prefix}locks" ADD COLUMN release_asked_token bigint;

CREATE FUNCTION "{schema}"."{prefix}renew_held_noting_asks"(p_names text[], p_owners text[], p_tokens bigint[],
                                                              p_ttls_ms bigint[])
RETURNS TABLE (at bigint, asked boolean)
LANGUAGE sql
SET enable_seqscan = off
AS $fn$
WITH h AS (SELECT h.name COLLATE "C" AS name, h.owner, h.token, h.ttl_ms, h.position
           FROM unnest(p_names, p_owners, p_tokens, p_ttls_ms) WITH ORDINALITY AS h(name, owner, token, ttl_ms, position)),
     mine AS (SELECT l.name, h.ttl_ms, h.position, l.release_asked_token IS NOT DISTINCT FROM l.token AS asked
              FROM h JOIN "{schema}"."{prefix}locks" l ON l.name = h.name AND l.owner = h.owner AND l.token = h.token
              ORDER BY l.name FOR NO KEY UPDATE OF l SKIP LOCKED),
     c AS (SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM mine) m),
     renewed AS (UPDATE "{schema}"."{prefix}locks" AS l
                 SET expires_at = greatest(l.expires_at, c.now + (m.ttl_ms + l.lock_delay_ms) * interval '1 millisecond')
                 FROM mine m, c
                 WHERE l.name = m.name AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > c.now
                 RETURNING m.position, m.asked)
SELECT position - 1, asked FROM renewed
UNION ALL
SELECT -h.position, false
FROM h JOIN "{schema}"."{prefix}locks" l ON l.name = h.name AND l.owner = h.owner AND l.token = h.token
WHERE (SELECT count(*) FROM mine) < cardinality(p_names) AND NOT EXISTS (SELECT FROM mine m WHERE m.position = h.position);
$fn$;
