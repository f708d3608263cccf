-- dblock schema version 3: leases that a re-entry never shortens, one clock reading per call,
-- and renewals that say which of the given locks they renewed (by position, not by name: two
-- owners of one manager may list the same name, only one of them holding it).

-- What the library calls: insert, re-enter or take over in one call, with one clock reading
-- (v_now), given the token of the grant the caller already holds (0 for none).
-- - A re-entry needs the held token: a live row of the caller's with another token is a leftover
--   (a release whose reply was lost, say) that the caller no longer counts, taken over afresh
--   with a new token instead of being re-entered with a count the caller does not know.
-- - A re-entry keeps the later of the two expiries: a shorter TTL never cuts the lease a holder
--   relies on.
-- - One reading: 0001 read the clock per expression, and a re-entry at the very instant of expiry
--   was decided "live" for the count and "expired" for the token.
CREATE FUNCTION "{schema}"."{prefix}acquire_held"(p_name text, p_owner text, p_ttl_ms bigint, p_held_token bigint)
RETURNS TABLE (lock_count integer, lock_token bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_expires timestamptz := v_now + p_ttl_ms * interval '1 millisecond';
BEGIN
  INSERT INTO "{schema}"."{prefix}locks" AS l (name, owner, count, token, acquired_at, expires_at)
  VALUES (p_name, p_owner, 1, 0, v_now, v_expires)
  ON CONFLICT (name) DO UPDATE SET
    count       = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > v_now AND l.token = p_held_token
                       THEN l.count + 1 ELSE 1 END,
    token       = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > v_now AND l.token = p_held_token
                       THEN l.token ELSE nextval('"{schema}"."{prefix}token_seq"') END,
    acquired_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > v_now AND l.token = p_held_token
                       THEN l.acquired_at ELSE EXCLUDED.acquired_at END,
    owner       = EXCLUDED.owner,
    expires_at  = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > v_now AND l.token = p_held_token
                       THEN greatest(l.expires_at, EXCLUDED.expires_at) ELSE EXCLUDED.expires_at END
  WHERE l.owner = EXCLUDED.owner OR l.expires_at <= v_now
  RETURNING l.count, l.token INTO lock_count, lock_token;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF lock_token = 0 THEN
    UPDATE "{schema}"."{prefix}locks" SET token = nextval('"{schema}"."{prefix}token_seq"')
    WHERE name = p_name RETURNING token INTO lock_token;
  END IF;
  RETURN NEXT;
END
$fn$;

-- 0001's acquire, for other languages, now the same as acquire_held with the token of the
-- caller's own row (so it re-enters that row as before), and with its fixes: one clock reading
-- (a re-entry at the very instant of expiry was decided "live" for the count and "expired" for
-- the token by two readings), and a re-entry that never shortens the lease.
CREATE OR REPLACE FUNCTION "{schema}"."{prefix}acquire"(p_name text, p_owner text, p_ttl_ms bigint)
RETURNS TABLE (lock_count integer, lock_token bigint)
LANGUAGE sql AS $fn$
  SELECT * FROM "{schema}"."{prefix}acquire_held"(p_name, p_owner, p_ttl_ms, coalesce(
    (SELECT token FROM "{schema}"."{prefix}locks" WHERE name = p_name AND owner = p_owner), 0));
$fn$;

-- Renews the locks still carrying the given owner and token and a live lease, never shortening
-- one; returns the 0-based positions of those renewed. One clock reading for the whole call.
-- enable_seqscan is off for the reason given at renew in 0001.
CREATE FUNCTION "{schema}"."{prefix}renew_held"(p_names text[], p_owners text[], p_tokens bigint[], p_ttls_ms bigint[])
RETURNS SETOF bigint
LANGUAGE sql
SET enable_seqscan = off
AS $fn$
  UPDATE "{schema}"."{prefix}locks" AS l
  SET expires_at = greatest(l.expires_at, c.now + h.ttl_ms * interval '1 millisecond')
  FROM unnest(p_names, p_owners, p_tokens, p_ttls_ms) WITH ORDINALITY AS h(name, owner, token, ttl_ms, position),
       (SELECT clock_timestamp() AS now) AS c
  WHERE l.name = h.name AND l.owner = h.owner AND l.token = h.token AND l.expires_at > c.now
  RETURNING h.position - 1;
$fn$;
