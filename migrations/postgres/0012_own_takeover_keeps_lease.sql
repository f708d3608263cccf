-- dblock schema version 12: a takeover of the caller's own live row keeps the later lease and the
-- longer lock-delay, as a re-entry does. The caller takes over its own live row when it names
-- another token than the row's: a leftover it no longer counts, or its own acquisition landing
-- after its reply was lost, when a guard of the owner may believe that row's lease by then. Before,
-- the takeover wrote the new, perhaps shorter lease, and the name could be granted to another owner
-- while that guard still believed it held (doc/semantics.md, "How the core is tested"). The library
-- sends its statement inline (pg_sql.hpp); 0008's acquire_held, for other languages, is re-defined
-- with the same change (tests/postgres/acquire_forms_test.cpp keeps the two in step).
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
