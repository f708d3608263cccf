-- dblock schema version 4: groups of holders of one name in table mode — the permits of a counting
-- semaphore, and the readers of a read-write lock — and writers that readers cannot starve.
--
-- A group holds its name through the name's row in the lock table, as a single holder would: its
-- owner is '(permits)' or '(readers)' (no owner id dblock makes starts with '('), its token is the
-- group's epoch, and its lease is the latest of its members' leases. So a plain (exclusive)
-- acquisition, unchanged since 0003, is refused while a group holds the name and takes it over once
-- every member's lease has ended; the reaper deletes it like any row. The members are rows of the
-- holders table below, each with its own lease and fencing token. Every statement on a group locks
-- the name's row first: that serialises a group's members, so counting them cannot race.

CREATE TABLE "{schema}"."{prefix}holders" (
  name        text COLLATE "C" NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 255),
  owner       text NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('permit', 'shared', 'writer')),
  count       integer NOT NULL CHECK (count >= 0),
  token       bigint NOT NULL,
  epoch       bigint NOT NULL,
  acquired_at timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (name, owner, kind)
);
CREATE INDEX "{prefix}holders_expires_at" ON "{schema}"."{prefix}holders" (expires_at);

-- Takes a permit (p_kind 'permit', at most p_capacity members) or a read lock ('shared', refused
-- while a writer waits: writer preference), or re-enters the caller's membership (p_held_token:
-- the token of the membership the caller holds, 0 for none). One clock reading. Returns the
-- re-entrancy count and the member's token, or no row when refused.
-- Tokens: a permit draws its own from the sequence while the name's row is locked, so permits'
-- tokens rise in grant order; readers share the group's epoch, drawn when the group began, so
-- every exclusive grant after the group has a larger token than any reader of it.
CREATE FUNCTION "{schema}"."{prefix}acquire_member"(p_name text, p_owner text, p_kind text, p_capacity bigint,
                                                    p_ttl_ms bigint, p_held_token bigint)
RETURNS TABLE (lock_count integer, lock_token bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_expires timestamptz := v_now + p_ttl_ms * interval '1 millisecond';
  v_group text := CASE p_kind WHEN 'permit' THEN '(permits)' ELSE '(readers)' END;
  v_row "{schema}"."{prefix}locks"%ROWTYPE;
  v_member "{schema}"."{prefix}holders"%ROWTYPE;
  v_free boolean;
  v_epoch bigint;
  v_token bigint;
  v_live bigint;
BEGIN
  IF p_kind NOT IN ('permit', 'shared') THEN
    RAISE EXCEPTION 'acquire_member: kind must be permit or shared, not %', p_kind USING ERRCODE = '22023';
  END IF;
  -- At most twice: when the name has no row and another caller inserts it first, lock theirs.
  FOR attempt IN 1..2 LOOP
    SELECT * INTO v_row FROM "{schema}"."{prefix}locks" WHERE name = p_name FOR UPDATE;
    v_free := NOT FOUND OR v_row.expires_at <= v_now;
    IF NOT v_free AND v_row.owner <> v_group THEN
      RETURN;  -- an exclusive holder, or a group of the other kind
    END IF;
    IF NOT v_free THEN
      SELECT * INTO v_member FROM "{schema}"."{prefix}holders"
      WHERE name = p_name AND owner = p_owner AND kind = p_kind;
      IF FOUND AND p_held_token <> 0 AND v_member.token = p_held_token AND v_member.epoch = v_row.token
         AND v_member.expires_at > v_now THEN
        UPDATE "{schema}"."{prefix}holders" SET count = count + 1, expires_at = greatest(expires_at, v_expires)
        WHERE name = p_name AND owner = p_owner AND kind = p_kind;
        UPDATE "{schema}"."{prefix}locks" SET expires_at = greatest(expires_at, v_expires) WHERE name = p_name;
        lock_count := v_member.count + 1;
        lock_token := v_member.token;
        RETURN NEXT;
        RETURN;
      END IF;
      IF p_kind = 'permit' THEN
        SELECT count(*) INTO v_live FROM "{schema}"."{prefix}holders"
        WHERE name = p_name AND kind = 'permit' AND epoch = v_row.token AND expires_at > v_now AND owner <> p_owner;
        IF v_live >= p_capacity THEN
          RETURN;
        END IF;
      END IF;
    END IF;
    IF p_kind = 'shared' AND EXISTS (
        SELECT 1 FROM "{schema}"."{prefix}holders"
        WHERE name = p_name AND kind = 'writer' AND expires_at > v_now AND owner <> p_owner) THEN
      RETURN;  -- a writer waits: new readers queue behind it
    END IF;
    IF NOT v_free THEN
      v_epoch := v_row.token;
      v_token := CASE WHEN p_kind = 'permit' THEN nextval('"{schema}"."{prefix}token_seq"') ELSE v_epoch END;
      UPDATE "{schema}"."{prefix}locks" SET count = count + 1, expires_at = greatest(expires_at, v_expires)
      WHERE name = p_name;
    ELSE
      -- A new group: its row is inserted or taken over with token 0, and the epoch drawn only
      -- now that the row is ours, as in 0001's acquire.
      IF v_row.name IS NULL THEN
        INSERT INTO "{schema}"."{prefix}locks" (name, owner, count, token, acquired_at, expires_at)
        VALUES (p_name, v_group, 1, 0, v_now, v_expires) ON CONFLICT (name) DO NOTHING;
        IF NOT FOUND THEN
          CONTINUE;
        END IF;
      ELSE
        UPDATE "{schema}"."{prefix}locks" SET owner = v_group, count = 1, token = 0, acquired_at = v_now,
                                              expires_at = v_expires
        WHERE name = p_name;
      END IF;
      v_epoch := nextval('"{schema}"."{prefix}token_seq"');
      v_token := v_epoch;
      UPDATE "{schema}"."{prefix}locks" SET token = v_epoch WHERE name = p_name;
      -- Members of earlier groups of this name: every one of their leases has ended.
      DELETE FROM "{schema}"."{prefix}holders" WHERE name = p_name AND kind <> 'writer';
    END IF;
    INSERT INTO "{schema}"."{prefix}holders" AS m (name, owner, kind, count, token, epoch, acquired_at, expires_at)
    VALUES (p_name, p_owner, p_kind, 1, v_token, v_epoch, v_now, v_expires)
    ON CONFLICT (name, owner, kind) DO UPDATE SET
      count = 1, token = EXCLUDED.token, epoch = EXCLUDED.epoch, acquired_at = EXCLUDED.acquired_at,
      expires_at = EXCLUDED.expires_at;
    lock_count := 1;
    lock_token := v_token;
    RETURN NEXT;
    RETURN;
  END LOOP;
END
$fn$;

-- Gives back one level of a membership. Returns the levels left (0: the membership ended) and
-- whether the name's row changed so that a waiter may now be granted (a member left), or no row
-- when the membership is not the caller's any more (lapsed and its group ended or taken over).
-- The group's row goes with its last live member; otherwise its lease shrinks to the latest
-- lease still live, so a writer waits no longer than the members it waits for.
CREATE FUNCTION "{schema}"."{prefix}release_member"(p_name text, p_owner text, p_kind text, p_token bigint)
RETURNS TABLE (lock_count integer, freed boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_group text := CASE p_kind WHEN 'permit' THEN '(permits)' ELSE '(readers)' END;
  v_row "{schema}"."{prefix}locks"%ROWTYPE;
  v_left integer;
  v_epoch bigint;
  v_live bigint;
  v_latest timestamptz;
BEGIN
  SELECT * INTO v_row FROM "{schema}"."{prefix}locks" WHERE name = p_name FOR UPDATE;
  UPDATE "{schema}"."{prefix}holders" SET count = count - 1
  WHERE name = p_name AND owner = p_owner AND kind = p_kind AND token = p_token
  RETURNING count, epoch INTO v_left, v_epoch;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF v_row.name IS NULL OR v_row.token <> v_epoch OR v_row.owner <> v_group THEN
    DELETE FROM "{schema}"."{prefix}holders" WHERE name = p_name AND owner = p_owner AND kind = p_kind;
    RETURN;  -- a lapsed member of a group that has ended
  END IF;
  IF v_left > 0 THEN
    lock_count := v_left;
    freed := false;
    RETURN NEXT;
    RETURN;
  END IF;
  DELETE FROM "{schema}"."{prefix}holders" WHERE name = p_name AND owner = p_owner AND kind = p_kind;
  SELECT count(*), max(expires_at) INTO v_live, v_latest FROM "{schema}"."{prefix}holders"
  WHERE name = p_name AND kind = p_kind AND epoch = v_epoch AND expires_at > v_now;
  IF v_live = 0 THEN
    DELETE FROM "{schema}"."{prefix}locks" WHERE name = p_name;
  ELSE
    UPDATE "{schema}"."{prefix}locks" SET count = v_live, expires_at = v_latest WHERE name = p_name;
  END IF;
  lock_count := 0;
  freed := true;
  RETURN NEXT;
END
$fn$;

-- Renews memberships still live in a live group, never shortening a lease, and the groups' rows
-- with them; returns the 0-based positions of those renewed. The groups' rows are locked first,
-- in name order, as acquisitions and releases lock them before touching members.
CREATE FUNCTION "{schema}"."{prefix}renew_members"(p_names text[], p_owners text[], p_kinds text[],
                                                   p_tokens bigint[], p_ttls_ms bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET enable_seqscan = off
AS $fn$
DECLARE
  v_now timestamptz := clock_timestamp();
BEGIN
  PERFORM 1 FROM "{schema}"."{prefix}locks" WHERE name = ANY (p_names) ORDER BY name FOR UPDATE;
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
