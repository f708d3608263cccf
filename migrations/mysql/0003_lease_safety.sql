-- dblock schema version 3 for MySQL/MariaDB: an acquire function that is correct under every
-- client flag, reads the clock once and never shortens a lease on re-entry.

-- What the library calls: insert, re-enter or take over in one statement, with one clock reading
-- (v_now), given the token of the grant the caller already holds (0 for none).
-- - The caller is granted exactly when the row carries its owner afterwards. 0001 decided by
--   ROW_COUNT(), which a client connected with CLIENT_FOUND_ROWS (Connector/J's default) sees as
--   1 for an upsert that changed nothing: it was granted a lock another owner held.
-- - A re-entry needs the held token: a live row of the caller's with another token is a leftover
--   (a release whose reply was lost, say) that the caller no longer counts, taken over afresh.
-- - A re-entry keeps the later of the two expiries.
-- - Assignments run left to right and each reads the columns assigned before it: count,
--   acquired_at and token decide from the old row, and token 0 then marks a takeover for the
--   columns after it.
CREATE OR REPLACE FUNCTION `{prefix}acquire_held`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_ttl_us BIGINT,
  p_held_token BIGINT)
RETURNS VARCHAR(64) CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_count INT;
  DECLARE v_token BIGINT;
  INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at)
  VALUES (p_name, p_owner, 1, 0, v_now, v_now + INTERVAL p_ttl_us MICROSECOND)
  ON DUPLICATE KEY UPDATE
    count       = IF(owner = VALUES(owner) AND expires_at > v_now AND token = p_held_token, count + 1,
                     IF(expires_at <= v_now OR owner = VALUES(owner), 1, count)),
    acquired_at = IF(expires_at <= v_now OR (owner = VALUES(owner) AND token <> p_held_token),
                     VALUES(acquired_at), acquired_at),
    token       = IF(expires_at <= v_now OR (owner = VALUES(owner) AND token <> p_held_token), 0, token),
    expires_at  = IF(token = 0, VALUES(expires_at),
                     IF(owner = VALUES(owner) AND expires_at > v_now AND token = p_held_token,
                        GREATEST(expires_at, VALUES(expires_at)), expires_at)),
    owner       = IF(token = 0, VALUES(owner), owner);
  SELECT owner, count, token INTO v_owner, v_count, v_token FROM `{prefix}locks` WHERE name = p_name;
  IF v_owner <> p_owner THEN
    RETURN NULL;
  END IF;
  IF v_token = 0 THEN
    SET v_token = NEXTVAL(`{prefix}token_seq`);
    UPDATE `{prefix}locks` SET token = v_token WHERE name = p_name;
  END IF;
  RETURN CONCAT(v_count, ' ', v_token);
END;

-- 0001's acquire, for other languages: acquire_held with the token of the caller's own row, so it
-- re-enters that row as before, with acquire_held's fixes. (The row is read in a statement of its
-- own: a statement that reads the table may not call a function that writes it, error 1442.)
CREATE OR REPLACE FUNCTION `{prefix}acquire`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_ttl_us BIGINT)
RETURNS VARCHAR(64) CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_token BIGINT;
  SET v_token = COALESCE((SELECT token FROM `{prefix}locks` WHERE name = p_name AND owner = p_owner), 0);
  RETURN `{prefix}acquire_held`(p_name, p_owner, p_ttl_us, v_token);
END;
