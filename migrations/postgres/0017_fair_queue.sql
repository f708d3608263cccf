-- dblock schema version 17: waiters are rows, served first come, first served (doc/fair-queue.md).
-- Used only by managers that opt in (ManagerOptions::fair_queue); nothing else reads or writes them.
--
-- A waiting acquisition that failed its first try records itself: name, owner, kind, arrival order
-- (seq, from a sequence drawn under the name's transaction-level advisory key, the key every grant
-- of the name takes, so seq follows arrival per name) and a waiter lease (expires_at) its waiter
-- renews. The last-level release of an opted-in holder deletes its row and, in the same statement and
-- commit, grants the name to the first waiter whose lease is live (its owner, a new token, its TTL),
-- deleting that waiter's row, and wakes it (NOTIFY). A waiter whose lease ended is skipped and the
-- reaper deletes it. A waiter leaves by deleting its own row: the hand-off locks the row it grants
-- (FOR UPDATE), so a leave and a grant never both take effect. New objects: the runtime role needs
-- DML on the table, USAGE on the sequence and EXECUTE on the functions (`dblock migrate grants`).
CREATE SEQUENCE "{schema}"."{prefix}waiter_seq" AS bigint CACHE 1;

CREATE TABLE "{schema}"."{prefix}waiters" (
  name       text COLLATE "C" NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 255),
  seq        bigint NOT NULL,
  owner      text NOT NULL,
  kind       text NOT NULL CHECK (kind IN ('exclusive', 'shared', 'permit')),
  ttl_ms     bigint NOT NULL CHECK (ttl_ms > 0),
  queued_at  timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (name, seq)
);
CREATE UNIQUE INDEX "{prefix}waiters_owner" ON "{schema}"."{prefix}waiters" (name, owner, kind);
CREATE INDEX "{prefix}waiters_expires_at" ON "{schema}"."{prefix}waiters" (expires_at);

-- A waiter's turn, in one round trip. p_seq = 0: a new arrival; it takes the name if it is free and
-- nobody live waits, otherwise it queues (an earlier row of the same owner moves to the back).
-- p_seq > 0: a queued waiter renews its lease and, when it is the first live waiter and the name is
-- free (a holder's lease ended without a release), takes it. Returns one row: waiter_seq > 0 and
-- lock_count 0 when queued (left_ms: the holder's lease left, 0 for none); waiter_seq 0 and a grant
-- (count, token, lease left) when the name is ours; no row when p_seq's row is gone and no grant is
-- ours (left, or reaped after its lease ended).
CREATE FUNCTION "{schema}"."{prefix}wait_turn"(p_name text, p_owner text, p_ttl_ms bigint, p_waiter_ttl_ms bigint,
                                                p_seq bigint)
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
  waiter_seq := p_seq;
  lock_count := 0;
  lock_token := 0;
  SELECT greatest(floor(extract(epoch FROM l.expires_at - v_now) * 1000)::bigint, 0) INTO left_ms
  FROM "{schema}"."{prefix}locks" l WHERE l.name = p_name;
  left_ms := coalesce(left_ms, 0);
  RETURN NEXT;
END
$fn$;

-- The last-level release of (p_name, p_owner, p_token), handing the name to the first live
-- exclusive waiter in the same commit. Returns no row when the row is not the caller's (nothing
-- changed); otherwise one row: the owner granted, '' when nobody live waits (the name is free, the
-- commit need not wait for the disk, and listeners of the installation's key p_key are woken on
-- p_channel as a plain release wakes them). A grant waits for the disk and always notifies.
CREATE FUNCTION "{schema}"."{prefix}release_handing_off"(p_name text, p_owner text, p_token bigint, p_key integer,
                                                          p_channel text)
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
  ORDER BY w.seq LIMIT 1 FOR UPDATE;
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
