-- dblock schema version 9: the fence, called inside the application's own transaction.
--
-- SELECT "<schema>"."<prefix>fence"(name, token) as the transaction's first statement returns only
-- when `token` is the live holder of `name` by the database's clock (not a revoked, min-hold or
-- group row), and share-locks the lock row: a takeover, the reaper, a revocation or a forced
-- release of that row needs a stronger row lock, so none of them can commit before this
-- transaction commits or rolls back. Otherwise it raises SQLSTATE DBF01 and the transaction is
-- aborted. It then bounds the transaction by the lease left (at least 5 ms), so a paused caller
-- cannot keep the name past its lease: the server ends a session idle in the transaction that long
-- (idle_in_transaction_session_timeout), and cancels any one statement running that long. Both
-- settings are LOCAL: they end with the transaction. Returns the lease left in milliseconds.
-- doc/semantics.md ("Fence") and doc/sql-contract.md describe the contract.
CREATE FUNCTION "{schema}"."{prefix}fence"(p_name text, p_token bigint)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_left_ms bigint;
BEGIN
  SELECT ceil(extract(epoch FROM l.expires_at - l.lock_delay_ms * interval '1 millisecond' - v_now) * 1000)::bigint INTO v_left_ms
  FROM "{schema}"."{prefix}locks" l
  WHERE l.name = p_name AND l.token = p_token AND l.expires_at - l.lock_delay_ms * interval '1 millisecond' > v_now
    AND l.owner NOT LIKE '(revoked)%' AND l.owner NOT LIKE '(min-hold)%' AND l.owner NOT IN ('(permits)', '(readers)')
  FOR SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dblock fence: token % is not the live holder of lock %', p_token, to_json(p_name)::text
      USING ERRCODE = 'DBF01';
  END IF;
  v_left_ms := greatest(v_left_ms, 5);
  PERFORM set_config('idle_in_transaction_session_timeout', v_left_ms::text, true),
          set_config('statement_timeout', v_left_ms::text, true);
  RETURN v_left_ms;
END
$fn$;
