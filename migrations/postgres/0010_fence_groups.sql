-- dblock schema version 10: the fence of a group's member — a permit of a semaphore or a reader of
-- a read-write lock (doc/semantics.md "Fence", doc/sql-contract.md). <prefix>fence(name, token),
-- for plain locks, is unchanged and still refuses a group's row.
--
-- SELECT "<schema>"."<prefix>fence_member"(name, owner, kind, token), kind 'permit' or 'shared',
-- returns only when that membership (the holders row of name, owner and kind, with that token) is
-- live by the database's clock and belongs to the group that holds the name now, and share-locks
-- the group's row and then the member's row, in the order every group statement locks them. Fences
-- of members do not block each other (share locks); a takeover, reap, revocation or forced
-- release of the name, and any acquisition, release or renewal of the group's members (they all
-- write the group's row), wait for the fenced transaction to end. Otherwise it raises DBF01 with
-- the message `dblock fence: token T is not a live member of lock "NAME"`. It bounds the
-- transaction by the member's lease left, as the fence does, and returns it in milliseconds.
CREATE FUNCTION "{schema}"."{prefix}fence_member"(p_name text, p_owner text, p_kind text, p_token bigint)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_group text := CASE p_kind WHEN 'permit' THEN '(permits)' WHEN 'shared' THEN '(readers)' END;
  v_epoch bigint;
  v_left_ms bigint;
BEGIN
  SELECT l.token INTO v_epoch FROM "{schema}"."{prefix}locks" l
  WHERE l.name = p_name AND l.owner = v_group AND l.expires_at > v_now
  FOR SHARE;
  IF FOUND THEN
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
