-- dblock schema version 19: a holder can be asked to let go, and can hand its lock to a named
-- waiter (doc/semantics.md, "Asking a holder to let go"). Store::request_release (`dblock release
-- --ask`, the sidecar's POST /api/request-release) writes the asked grant's token into
-- release_asked_token; the ask stands for that grant only, so a later grant of the name (a new
-- token) is not asked, and nothing has to clear the column. The holder learns of it from its next
-- renewal: renew_held_noting_asks renews as renew_held_or_busy (migration 0016) does and says, per
-- lock renewed, whether its grant was asked. renew_held_or_busy stays, for libraries of schema 16
-- to 18 during an upgrade. Adding a nullable column without a default rewrites nothing. New
-- functions: no new grant beyond EXECUTE, which PUBLIC has by default (`dblock migrate grants` lists
-- it).
ALTER TABLE "{schema}"."{prefix}locks" ADD COLUMN release_asked_token bigint;

-- A holder's note (LockOptions::note, `dblock run --note`): shown beside it by `dblock locks` and the
-- status page. Written after the grant by its holder, for that grant's token: a later grant of the
-- name (a takeover after its lease ended) does not show it.
ALTER TABLE "{schema}"."{prefix}locks" ADD COLUMN holder_note text;
ALTER TABLE "{schema}"."{prefix}locks" ADD COLUMN note_token bigint;

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

-- A hand-over to a named successor (Lock::hand_over, LeaderElection::hand_over): release_handing_off
-- (migration 0017) whose grant goes to the live exclusive waiter `p_successor` when it waits, ahead
-- of earlier ones, and else to the first live waiter as before. Same locks, same commit: the name is
-- never free between the two owners.
CREATE FUNCTION "{schema}"."{prefix}release_handing_to"(p_name text, p_owner text, p_token bigint, p_successor text,
                                                        p_key integer, p_channel text)
RETURNS TABLE (granted_owner text)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz;
  v_seq bigint;
  v_owner text;
  v_ttl_ms bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_name, 7310958615390432069));
  DELETE FROM "{schema}"."{prefix}locks" l WHERE l.name = p_name AND l.owner = p_owner AND l.token = p_token;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  v_now := clock_timestamp();
  SELECT w.seq, w.owner, w.ttl_ms INTO v_seq, v_owner, v_ttl_ms
  FROM "{schema}"."{prefix}waiters" w
  WHERE w.name = p_name AND w.kind = 'exclusive' AND w.expires_at > v_now
  ORDER BY w.owner = p_successor DESC, w.seq LIMIT 1 FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF NOT pg_try_advisory_xact_lock(p_key, hashtext(p_name)) THEN
      PERFORM pg_notify(p_channel, p_name);
    END IF;
    granted_owner := '';
    RETURN NEXT;
    RETURN;
  END IF;
  DELETE FROM "{schema}"."{prefix}waiters" w WHERE w.name = p_name AND w.seq = v_seq;
  INSERT INTO "{schema}"."{prefix}locks" (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
  VALUES (p_name, v_owner, 1, nextval('"{schema}"."{prefix}token_seq"'), v_now,
          v_now + v_ttl_ms * interval '1 millisecond', 0);
  PERFORM pg_notify(p_channel, p_name);
  granted_owner := v_owner;
  RETURN NEXT;
END
$fn$;
