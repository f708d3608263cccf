-- dblock schema version 2: waiting for a PostgreSQL advisory lock (session or transaction
-- scoped, shared or exclusive) with a timeout, and drawing its fencing token, in one call.
--
-- The SET clause restores lock_timeout when the function returns, so the caller's session or
-- transaction keeps its own setting. A timeout is caught inside, so it never aborts the
-- caller's transaction; the result is then NULL. A session lock can be granted in the very
-- moment the timeout fires and is then held although the wait failed, so pg_locks is asked
-- before NULL is returned. The token is drawn only after the grant: it is greater than every
-- token drawn by an earlier holder of the key.
CREATE FUNCTION "{schema}"."{prefix}advisory_lock"(
  p_key bigint, p_first integer, p_second integer, p_two_part boolean,
  p_shared boolean, p_xact boolean, p_wait_ms bigint)
RETURNS bigint
LANGUAGE plpgsql
SET lock_timeout = 0
AS $fn$
BEGIN
  PERFORM set_config('lock_timeout', greatest(p_wait_ms, 1) || 'ms', true);
  BEGIN
    CASE
      WHEN p_two_part AND p_xact AND p_shared THEN PERFORM pg_advisory_xact_lock_shared(p_first, p_second);
      WHEN p_two_part AND p_xact THEN PERFORM pg_advisory_xact_lock(p_first, p_second);
      WHEN p_two_part AND p_shared THEN PERFORM pg_advisory_lock_shared(p_first, p_second);
      WHEN p_two_part THEN PERFORM pg_advisory_lock(p_first, p_second);
      WHEN p_xact AND p_shared THEN PERFORM pg_advisory_xact_lock_shared(p_key);
      WHEN p_xact THEN PERFORM pg_advisory_xact_lock(p_key);
      WHEN p_shared THEN PERFORM pg_advisory_lock_shared(p_key);
      ELSE PERFORM pg_advisory_lock(p_key);
    END CASE;
  EXCEPTION WHEN lock_not_available THEN
    -- A transaction lock taken in this block was undone with it; a session lock was not.
    IF p_xact OR NOT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid = CASE WHEN p_two_part THEN p_first::oid ELSE ((p_key >> 32) & 4294967295)::oid END
          AND objid = CASE WHEN p_two_part THEN p_second::oid ELSE (p_key & 4294967295)::oid END
          AND objsubid = CASE WHEN p_two_part THEN 2 ELSE 1 END
          AND mode = CASE WHEN p_shared THEN 'ShareLock' ELSE 'ExclusiveLock' END) THEN
      RETURN NULL;
    END IF;
  END;
  RETURN nextval('"{schema}"."{prefix}token_seq"');
END
$fn$;
