-- dblock schema version 14: a renewal of group members reads the clock once it holds its groups'
-- rows, not before it waits for them.
--
-- renew_members (0004) read clock_timestamp() on entry, then waited for the groups' rows FOR UPDATE
-- behind whoever held them. A member whose lease ended during that wait, and whose place the holder
-- of the row gave to another (acquire_member judges liveness by its own, later, clock), was still
-- live by the early reading: it was renewed, and the group had one member more than its capacity
-- (a permit) or a reader beside a writer's turn. The reading now comes after the row locks, so a
-- renewal judges a member by the clock of the moment nothing else can change its group.
-- Function re-defined only (same signature): no new grant.
CREATE OR REPLACE FUNCTION "{schema}"."{prefix}renew_members"(p_names text[], p_owners text[], p_kinds text[],
                                                              p_tokens bigint[], p_ttls_ms bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET enable_seqscan = off
AS $fn$
DECLARE
  v_now timestamptz;
BEGIN
  PERFORM 1 FROM "{schema}"."{prefix}locks" WHERE name = ANY (p_names) ORDER BY name FOR UPDATE;
  v_now := clock_timestamp();
  RETURN QUERY
  WITH renewed AS (
    UPDATE "{schema}"."{prefix}holders" AS m
    SET expires_at = greatest(m.expires_at, v_now + h.ttl_ms * interval '1 millisecond')
    FROM unnest(p_names, p_owners, p_kinds, p_tokens, p_ttls_ms) WITH ORDINALITY AS h(name, owner, kind, token, ttl_ms, position),
         "{schema}"."{prefix}locks" AS l
    WHERE m.name = h.name AND m.owner = h.owner AND m.kind = h.kind AND m.token = h.token AND m.expires_at > v_now
      AND l.name = m.name AND l.token = m.epoch AND l.expires_at > v_now
      AND l.owner = CASE m.kind WHEN 'permit' THEN '(permits)' ELSE '(readers)' END
    RETURNING h.position, m.name, m.expires_at),
  groups AS (
    UPDATE "{schema}"."{prefix}locks" AS l SET expires_at = greatest(l.expires_at, g.latest)
    FROM (SELECT name, max(expires_at) AS latest FROM renewed GROUP BY name) AS g
    WHERE l.name = g.name
    RETURNING 1)
  SELECT position - 1 FROM renewed;
END
$fn$;
