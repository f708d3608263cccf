-- dblock schema version 15: the fence of a group's member reads the clock once it holds the
-- group's row, not before it waits for it.
--
-- fence_member (0010) read clock_timestamp() on entry, then waited for the group's row FOR SHARE
-- behind whoever held it. A member whose lease ended during that wait, and whose place the holder
-- of the row gave to another, still passed the fence: its fenced transaction wrote beside the
-- group's live members, one writer more than the group's capacity. The group's row is now locked
-- first and the clock read after it; nothing can give the member's place away while that share
-- lock is held. The plain fence (0009) needs no change: a takeover of its row changes the token it
-- checks. Function re-defined only (same signature): no new grant.
CREATE OR REPLACE FUNCTION "{schema}"."{prefix}fence_member"(p_name text, p_owner text, p_kind text, p_token bigint)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz;
  v_group text := CASE p_kind WHEN 'permit' THEN '(permits)' WHEN 'shared' THEN '(readers)' END;
  v_epoch bigint;
  v_group_expires timestamptz;
  v_left_ms bigint;
BEGIN
  SELECT l.token, l.expires_at INTO v_epoch, v_group_expires FROM "{schema}"."{prefix}locks" l
  WHERE l.name = p_name AND l.owner = v_group
  FOR SHARE;
  v_now := clock_timestamp();
  IF v_epoch IS NOT NULL AND v_group_expires > v_now THEN
    SELECT ceil(extract(epoch FROM m.expires_at - v_now) * 1000)::bigint INTO v_left_ms
    FROM "{schema}"."{prefix}holders" m
    WHERE m.name = p_name AND m.owner = p_owner AND m.kind = p_kind AND m.token = p_token AND m.epoch = v_epoch
      AND m.expires_at > v_now AND m.count > 0
    FOR SHARE;
  END IF;
  IF v_left_ms IS NULL THEN
    RAISE EXCEPTION 'dblock fence: token % is not a live member of lock %', p_token, to_json(p_name)::text
      USING ERRCODE = 'DBF01';
  END IF;
  v_left_ms := greatest(v_left_ms, 5);
  PERFORM set_config('idle_in_transaction_session_timeout', v_left_ms::text, true),
          set_config('statement_timeout', v_left_ms::text, true);
  RETURN v_left_ms;
END
$fn$;
