-- dblock schema version 12: a takeover of the caller's own live row keeps the later lease and the
-- longer lock-delay, as a re-entry does. The caller takes over its own live row when it names
-- another token than the row's: a leftover it no longer counts, or its own acquisition landing
-- after its reply was lost, when a guard of the owner may believe that row's lease by then. Before,
-- the takeover wrote the new, perhaps shorter lease, and the name could be granted to another owner
-- while that guard still believed it held (doc/semantics.md, "How the core is tested"). The library
-- sends its statement inline (pg_sql.hpp); 0008's acquire_held, for other languages, is re-defined
-- with the same change (tests/postgres/acquire_forms_test.cpp keeps the two in step), and so is
-- 0005's acquire_member for a permit holder's or reader's own membership.
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
                         THEN greatest(l.expires_at, EXCLUDED.expires_at + l.lock_delay_ms * interval '1 millisecond')
                         ELSE EXCLUDED.expires_at END,
    lock_delay_ms = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > v_now
                         THEN l.lock_delay_ms ELSE 0 END
  WHERE (l.owner = EXCLUDED.owner AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > v_now)
     OR l.expires_at <= v_now
  RETURNING l.count, l.token INTO lock_count, lock_token;
  IF FOUND THEN
    RETURN NEXT;
  END IF;
END
$fn$;

-- 0005's acquire_member with the same change for a membership: the caller's own membership row
-- taken over afresh (no held token, or another) keeps the later lease. A membership whose lease
-- has ended has an expiry before this call's, so it takes the new one; members of an earlier group
-- are deleted before the first member of a new group is written, so the row is of this group.
-- A reader's row taken afresh keeps its token (the group's epoch), so it also keeps its count and
-- adds one: a believing guard of the owner that still holds a level of it, or a release of it still
-- in flight, each takes one level off later, and resetting the count to 1 let the first of them
-- delete the membership under the new holder. A permit taken afresh has a new token: the old
-- levels' releases miss it, and its count starts at 1.
CREATE OR REPLACE FUNCTION "{schema}"."{prefix}acquire_member"(p_name text, p_owner text, p_kind text, p_capacity bigint,
                                                    p_ttl_ms bigint, p_held_token bigint)
RETURNS TABLE (lock_count integer, lock_token bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz;
  v_expires timestamptz;
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
  PERFORM pg_advisory_xact_lock(hashtextextended(p_name, 7310958615390432069));
  v_now := clock_timestamp();
  v_expires := v_now + p_ttl_ms * interval '1 millisecond';
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
      count = CASE WHEN m.token = EXCLUDED.token THEN m.count + 1 ELSE 1 END, token = EXCLUDED.token,
      epoch = EXCLUDED.epoch, acquired_at = EXCLUDED.acquired_at,
      expires_at = greatest(m.expires_at, EXCLUDED.expires_at);
    lock_count := 1;
    lock_token := v_token;
    RETURN NEXT;
    RETURN;
  END LOOP;
END
$fn$;
