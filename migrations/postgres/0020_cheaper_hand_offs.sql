-- dblock schema version 20: the fair queue's hand-off costs less (doc/fair-queue.md, "What a
-- hand-off costs"). A waiter's turn that grants nothing commits without waiting for the disk, and
-- the release that grants tells the waiter its grant (release_granting, below).
--
-- wait_turn (0017) queues a waiter, renews its waiter lease, or takes the name for it; only the
-- last is a grant, and only a grant must survive a crash before the waiter is told of it. A
-- queueing or a renewal lost in a crash costs the waiter its place: its next turn finds its row
-- gone (or its lease shorter) and queues again, as after a row the reaper deleted. Each queueing
-- turn waited for the disk while it held the name's transaction lock, and so made the next release
-- (a grant, which must wait for the disk) wait for two flushes. The body is 0017's with that one
-- line; libraries of schema 17 to 19 call it as before. New function: no new grant beyond EXECUTE,
-- which PUBLIC has by default.
CREATE OR REPLACE FUNCTION "{schema}"."{prefix}wait_turn"(p_name text, p_owner text, p_ttl_ms bigint,
                                                           p_waiter_ttl_ms bigint, p_seq bigint)
RETURNS TABLE (waiter_seq bigint, lock_count integer, lock_token bigint, left_ms bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz;
  v_first bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_name, 7310958615390432069));
  v_now := clock_timestamp();
  IF p_seq > 0 THEN
    UPDATE "{schema}"."{prefix}waiters" w
    SET expires_at = greatest(w.expires_at, v_now + p_waiter_ttl_ms * interval '1 millisecond')
    WHERE w.name = p_name AND w.seq = p_seq AND w.owner = p_owner;
    IF NOT FOUND THEN
      RETURN QUERY SELECT 0::bigint, l.count, l.token, floor(extract(epoch FROM l.expires_at - v_now) * 1000)::bigint
                   FROM "{schema}"."{prefix}locks" l
                   WHERE l.name = p_name AND l.owner = p_owner AND l.expires_at > v_now;
      RETURN;
    END IF;
  END IF;
  SELECT min(w.seq) INTO v_first FROM "{schema}"."{prefix}waiters" w WHERE w.name = p_name AND w.expires_at > v_now;
  IF (v_first IS NULL OR v_first = p_seq)
     AND NOT EXISTS (SELECT FROM "{schema}"."{prefix}locks" l WHERE l.name = p_name AND l.expires_at > v_now) THEN
    INSERT INTO "{schema}"."{prefix}locks" AS l (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
    VALUES (p_name, p_owner, 1, nextval('"{schema}"."{prefix}token_seq"'), v_now,
            v_now + p_ttl_ms * interval '1 millisecond', 0)
    ON CONFLICT (name) DO UPDATE SET
      owner = EXCLUDED.owner, count = 1, token = EXCLUDED.token, acquired_at = EXCLUDED.acquired_at,
      expires_at = EXCLUDED.expires_at, lock_delay_ms = 0
    WHERE l.expires_at <= v_now
    RETURNING l.count, l.token INTO lock_count, lock_token;
    IF FOUND THEN
      DELETE FROM "{schema}"."{prefix}waiters" w WHERE w.name = p_name AND w.owner = p_owner AND w.kind = 'exclusive';
      waiter_seq := 0;
      left_ms := p_ttl_ms;
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  IF p_seq = 0 THEN
    INSERT INTO "{schema}"."{prefix}waiters" AS w (name, seq, owner, kind, ttl_ms, queued_at, expires_at)
    VALUES (p_name, nextval('"{schema}"."{prefix}waiter_seq"'), p_owner, 'exclusive', p_ttl_ms, v_now,
            v_now + p_waiter_ttl_ms * interval '1 millisecond')
    ON CONFLICT (name, owner, kind) DO UPDATE SET
      seq = EXCLUDED.seq, ttl_ms = EXCLUDED.ttl_ms, queued_at = EXCLUDED.queued_at, expires_at = EXCLUDED.expires_at
    RETURNING w.seq INTO p_seq;
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  waiter_seq := p_seq;
  lock_count := 0;
  lock_token := 0;
  SELECT greatest(floor(extract(epoch FROM l.expires_at - v_now) * 1000)::bigint, 0) INTO left_ms
  FROM "{schema}"."{prefix}locks" l WHERE l.name = p_name;
  left_ms := coalesce(left_ms, 0);
  RETURN NEXT;
END
$fn$;

-- The fair queue's release, telling the waiter it grants what it granted: release_handing_to
-- (0019), whose grant also notifies p_grant_channel with '<waiter seq>\n<token>\n<owner>\n<name>'
-- (owner ids have no control character; the name comes last, whole), so the granted waiter's
-- process wakes that waiter alone and it need not read its grant; no other process wakes to read.
-- p_channel still hears the name, as before, for listeners of earlier libraries. p_successor '':
-- none, and the first live waiter is found in the index's order.
CREATE FUNCTION "{schema}"."{prefix}release_granting"(p_name text, p_owner text, p_token bigint, p_successor text,
                                                      p_key integer, p_channel text, p_grant_channel text)
RETURNS TABLE (granted_owner text)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz;
  v_seq bigint;
  v_owner text;
  v_ttl_ms bigint;
  v_token bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_name, 7310958615390432069));
  DELETE FROM "{schema}"."{prefix}locks" l WHERE l.name = p_name AND l.owner = p_owner AND l.token = p_token;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  v_now := clock_timestamp();
  IF p_successor = '' THEN
    SELECT w.seq, w.owner, w.ttl_ms INTO v_seq, v_owner, v_ttl_ms
    FROM "{schema}"."{prefix}waiters" w
    WHERE w.name = p_name AND w.kind = 'exclusive' AND w.expires_at > v_now
    ORDER BY w.seq LIMIT 1 FOR UPDATE;
  ELSE
    SELECT w.seq, w.owner, w.ttl_ms INTO v_seq, v_owner, v_ttl_ms
    FROM "{schema}"."{prefix}waiters" w
    WHERE w.name = p_name AND w.kind = 'exclusive' AND w.expires_at > v_now
    ORDER BY w.owner = p_successor DESC, w.seq LIMIT 1 FOR UPDATE;
  END IF;
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
          v_now + v_ttl_ms * interval '1 millisecond', 0)
  RETURNING token INTO v_token;
  PERFORM pg_notify(p_grant_channel, v_seq || E'\n' || v_token || E'\n' || v_owner || E'\n' || p_name);
  PERFORM pg_notify(p_channel, p_name);
  granted_owner := v_owner;
  RETURN NEXT;
END
$fn$;
