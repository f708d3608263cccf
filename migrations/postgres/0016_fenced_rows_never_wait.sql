-- dblock schema version 16: nothing waits for a row an application's fenced transaction holds but
-- that row's own next owner (doc/semantics.md, "Fence").
--
-- The library's renewals no longer wait for a row another transaction holds: renew_held_or_busy
-- (plain locks) and renew_members_or_busy (memberships) renew as 0008's renew_held and 0014's
-- renew_members do, but lock the rows (a group's row, for members) in name order SKIP LOCKED, read
-- the clock once they are locked, and return a row another transaction holds (a fence share-locks
-- it until its transaction ends) as -(position + 1): left alone, neither renewed nor lost (the
-- library asks again soon; nobody can take the row while the fence holds it). A row skipped whose
-- newest version no longer matches is returned so too, and found lost on the next round. Functions
-- with enable_seqscan off, as renew_held: their bodies are planned without the arrays' values, and
-- a plan that scans the table per element took 19 s for 10,000 locks where the index takes 0.1 s.
-- renew_held and renew_members stay for other languages, waiting as before. The acquisition's
-- statement is the library's own (no function): it refuses another owner's live row by a read
-- that locks nothing and gives way after its lock_timeout. New functions: no new grant beyond
-- EXECUTE, which PUBLIC has by default (`dblock migrate grants` lists it).
CREATE FUNCTION "{schema}"."{prefix}renew_held_or_busy"(p_names text[], p_owners text[], p_tokens bigint[],
                                                          p_ttls_ms bigint[])
RETURNS SETOF bigint
LANGUAGE sql
SET enable_seqscan = off
AS $fn$
WITH h AS (SELECT h.name COLLATE "C" AS name, h.owner, h.token, h.ttl_ms, h.position
           FROM unnest(p_names, p_owners, p_tokens, p_ttls_ms) WITH ORDINALITY AS h(name, owner, token, ttl_ms, position)),
     mine AS (SELECT l.name, h.ttl_ms, h.position
              FROM h JOIN "{schema}"."{prefix}locks" l ON l.name = h.name AND l.owner = h.owner AND l.token = h.token
              ORDER BY l.name FOR NO KEY UPDATE OF l SKIP LOCKED),
     c AS (SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM mine) m),
     renewed AS (UPDATE "{schema}"."{prefix}locks" AS l
                 SET expires_at = greatest(l.expires_at, c.now + (m.ttl_ms + l.lock_delay_ms) * interval '1 millisecond')
                 FROM mine m, c
                 WHERE l.name = m.name AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > c.now
                 RETURNING m.position)
SELECT position - 1 FROM renewed
UNION ALL
SELECT -h.position
FROM h JOIN "{schema}"."{prefix}locks" l ON l.name = h.name AND l.owner = h.owner AND l.token = h.token
WHERE (SELECT count(*) FROM mine) < cardinality(p_names) AND NOT EXISTS (SELECT FROM mine m WHERE m.position = h.position);
$fn$;

CREATE FUNCTION "{schema}"."{prefix}renew_members_or_busy"(p_names text[], p_owners text[], p_kinds text[],
                                                             p_tokens bigint[], p_ttls_ms bigint[])
RETURNS SETOF bigint
LANGUAGE sql
SET enable_seqscan = off
AS $fn$
WITH h AS (SELECT h.name COLLATE "C" AS name, h.owner, h.kind, h.token, h.ttl_ms, h.position
           FROM unnest(p_names, p_owners, p_kinds, p_tokens, p_ttls_ms)
                WITH ORDINALITY AS h(name, owner, kind, token, ttl_ms, position)),
     mine AS (SELECT l.name FROM "{schema}"."{prefix}locks" l WHERE l.name = ANY (p_names)
              ORDER BY l.name FOR UPDATE OF l SKIP LOCKED),
     c AS (SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM mine) m),
     renewed AS (UPDATE "{schema}"."{prefix}holders" AS m
                 SET expires_at = greatest(m.expires_at, c.now + h.ttl_ms * interval '1 millisecond')
                 FROM h JOIN mine g ON g.name = h.name, c, "{schema}"."{prefix}locks" AS l
                 WHERE m.name = h.name AND m.owner = h.owner AND m.kind = h.kind AND m.token = h.token
                   AND m.expires_at > c.now
                   AND l.name = m.name AND l.token = m.epoch AND l.expires_at > c.now
                   AND l.owner = CASE m.kind WHEN 'permit' THEN '(permits)' ELSE '(readers)' END
                 RETURNING h.position, m.name, m.expires_at),
     groups AS (UPDATE "{schema}"."{prefix}locks" AS l SET expires_at = greatest(l.expires_at, g.latest)
                FROM (SELECT name, max(expires_at) AS latest FROM renewed GROUP BY name) AS g
                WHERE l.name = g.name
                RETURNING 1)
SELECT position - 1 FROM renewed
UNION ALL
SELECT -h.position FROM h
WHERE NOT EXISTS (SELECT FROM mine g WHERE g.name = h.name)
  AND EXISTS (SELECT FROM "{schema}"."{prefix}locks" l WHERE l.name = h.name);
$fn$;
