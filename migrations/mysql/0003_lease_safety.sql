-- dblock schema version 3 for MySQL/MariaDB: an acquire function that is correct under every
-- client flag, and a re-entry that never shortens the lease.
--
-- 0001 decided by ROW_COUNT(), which a client connected with CLIENT_FOUND_ROWS (Connector/J's
-- default) sees as 1 for an upsert that changed nothing: it was then granted a lock another
-- owner held. Here the row itself says who holds it after the upsert: the caller is granted
-- exactly when the row carries its owner. v_now is the one clock reading; a re-entry keeps the
-- later of the two expiries. The update assigns left to right: conditions read owner and
-- expires_at, which are assigned last (owner before expires_at, whose condition wants the new
-- owner). A takeover draws its token in the update, under the row lock; a fresh row afterwards.
CREATE OR REPLACE FUNCTION `{prefix}acquire`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_ttl_us BIGINT)
RETURNS VARCHAR(64) CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_count INT;
  DECLARE v_token BIGINT;
  INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at)
  VALUES (p_name, p_owner, 1, 0, v_now, v_now + INTERVAL p_ttl_us MICROSECOND)
  ON DUPLICATE KEY UPDATE
    count       = IF(owner = VALUES(owner) AND expires_at > v_now, count + 1,
                     IF(expires_at <= v_now, 1, count)),
    token       = IF(owner = VALUES(owner) AND expires_at > v_now, token,
                     IF(expires_at <= v_now, NEXTVAL(`{prefix}token_seq`), token)),
    acquired_at = IF(expires_at <= v_now, VALUES(acquired_at), acquired_at),
    owner       = IF(expires_at <= v_now, VALUES(owner), owner),
    expires_at  = IF(owner = VALUES(owner), GREATEST(expires_at, VALUES(expires_at)), expires_at);
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

-- What the library calls: acquire with the token of the grant the caller already holds (0 for
-- none). A re-entry needs that token: a live row of the caller's with another token is a leftover
-- (a release whose reply was lost, say) that the caller no longer counts, so it is taken over
-- afresh. Assignments run left to right and each reads the columns assigned before it: count,
-- acquired_at and token decide from the old row, and token 0 then marks a takeover for the
-- columns after it.
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
