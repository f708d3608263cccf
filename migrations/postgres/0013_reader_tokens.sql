-- dblock schema version 13: every reader's membership has a token of its own. A reader's token
-- was its group's epoch, so a membership that lapsed, was deleted by the reaper and was taken afresh
-- by its owner came back under the same token, and a release or give-back of the old one still in
-- flight (a statement stalled for longer than a lease) deleted the new one under the guards that
-- believed it. Now a reader that joins a group draws a token, as a permit holder does; the group's
-- first reader's is the epoch, drawn then. Its own membership row of the same group taken afresh
-- keeps its token and count (0012), so the levels still to be released stay counted; that row is
-- read FOR UPDATE, so the reaper cannot delete it between the read and the upsert. The epoch stays
-- the group's: fence_member (0010) and the group row still go by it. 0012's acquire_member
-- re-defined with those changes.
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
      -- Locked: the reaper deletes lapsed members without the group's row, and a reader's row it
      -- deleted after this read would be inserted anew under the token kept from it below.
      SELECT * INTO v_member FROM "{schema}"."{prefix}holders"
      WHERE name = p_name AND owner = p_owner AND kind = p_kind FOR UPDATE;
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
      -- A reader's own row of this group keeps its token (taken afresh: count+1, as in 0012); any
      -- other membership draws one of its own.
      v_token := CASE WHEN p_kind = 'shared' AND v_member.token IS NOT NULL AND v_member.epoch = v_epoch
                      THEN v_member.token
                      ELSE nextval('"{schema}"."{prefix}token_seq"') END;
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
