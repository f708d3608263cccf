-- dblock schema version 8: lock-delay after a lost lease (doc/semantics.md, "Lock-delay").
--
-- expires_at stays what it always was to everyone who wants the name: the moment it becomes free.
-- A lock taken with a lock-delay writes its lease's end PLUS the delay there and the delay in
-- lock_delay_ms, so its lease ends at expires_at - lock_delay_ms. Every path that frees a name
-- (a takeover, a group's acquisition, the reaper, a waiter's sleep, the functions other languages
-- call) keeps reading expires_at unchanged, so none of them can free a name in its delay, and a
-- lease that ends without a release keeps the name for the delay. Only the holder's own steps
-- read the lease: a renewal and a re-entry need it live, a renewal extends it and keeps the delay
-- behind it, and a re-entry never shortens either. A release deletes the row (no delay).
-- 0 (every existing row, and every grant without a delay): as before.
ALTER TABLE "{schema}"."{prefix}locks" ADD COLUMN lock_delay_ms bigint NOT NULL DEFAULT 0;

-- 0005's acquire_held, for other languages: its grants carry no delay, and the row of a lock with
-- one is re-entered only while its lease (not the delay after it) is live, keeping the delay.
-- The library sends the same statement inline with the delay as a parameter (pg_sql.hpp).
CREATE OR REPLACE FUNCTION "{schema}"."{prefix}acquire_held"(p_name text, p_owner text, p_ttl_ms bigint, p_held_token bigint)
RETURNS TABLE (lock_count integer, lock_token bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_name, 7310958615390432069));
  v_now := clock_timestamp();
  INSERT INTO "{schema}"."{prefix}locks" AS l (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
  VALUES (p_name, p_owner, 1, nextval('"{schema}"."{prefix}token_seq"'), v_now, v_now + p_ttl_ms * interval '1 millisecond', 0)
  ON CONFLICT (name) DO UPDATE SET
    count         = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > v_now
                              AND l.token = p_held_token
                         THEN l.count + 1 ELSE 1 END,
    token         = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > v_now
                              AND l.token = p_held_token
                         THEN l.token ELSE EXCLUDED.token END,
    acquired_at   = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > v_now
                              AND l.token = p_held_token
                         THEN l.acquired_at ELSE EXCLUDED.acquired_at END,
    owner         = EXCLUDED.owner,
    expires_at    = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > v_now
                              AND l.token = p_held_token
                         THEN greatest(l.expires_at, EXCLUDED.expires_at + l.lock_delay_ms * interval '1 millisecond')
                         ELSE EXCLUDED.expires_at END,
    lock_delay_ms = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > v_now
                              AND l.token = p_held_token
                         THEN l.lock_delay_ms ELSE 0 END
  WHERE (l.owner = EXCLUDED.owner AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > v_now)
     OR l.expires_at <= v_now
  RETURNING l.count, l.token INTO lock_count, lock_token;
  IF FOUND THEN
    RETURN NEXT;
  END IF;
END
$fn$;

-- 0003's renew_held: a lease is live until expires_at - lock_delay_ms, and a renewal keeps the
-- delay after the renewed lease. A lease that has ended is not renewed, even within its delay:
-- its holder is told it lost the lock, as for any lease that ended.
CREATE OR REPLACE FUNCTION "{schema}"."{prefix}renew_held"(p_names text[], p_owners text[], p_tokens bigint[], p_ttls_ms bigint[])
RETURNS SETOF bigint
LANGUAGE sql
SET enable_seqscan = off
AS $fn$
  UPDATE "{schema}"."{prefix}locks" AS l
  SET expires_at = greatest(l.expires_at, c.now + (h.ttl_ms + l.lock_delay_ms) * interval '1 millisecond')
  FROM unnest(p_names, p_owners, p_tokens, p_ttls_ms) WITH ORDINALITY AS h(name, owner, token, ttl_ms, position),
       (SELECT clock_timestamp() AS now) AS c
  WHERE l.name = h.name AND l.owner = h.owner AND l.token = h.token
    AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > c.now
  RETURNING h.position - 1;
$fn$;
