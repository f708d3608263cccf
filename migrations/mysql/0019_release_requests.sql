-- dblock schema version 19 for MySQL/MariaDB and Galera (one file): a holder can be asked to let
-- go, and can hand its lock to a named waiter (migrations/postgres/0019_release_requests.sql has
-- the design). The asked grant's token goes into release_asked_token; the library's renewal leaves
-- an asked row to a second statement that renews it and reads which were asked (UPDATE has no
-- RETURNING here), so a renewal with nothing asked stays one statement. A nullable column added
-- last: InnoDB adds it in place, without copying the table.
ALTER TABLE `{prefix}locks` ADD COLUMN IF NOT EXISTS release_asked_token BIGINT NULL;

-- A holder's note, for its grant's token (migrations/postgres/0019 says why).
ALTER TABLE `{prefix}locks` ADD COLUMN IF NOT EXISTS holder_note VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NULL;
ALTER TABLE `{prefix}locks` ADD COLUMN IF NOT EXISTS note_token BIGINT NULL;

-- A hand-over to a named successor: 0018's release_handing_off whose grant goes to the live exclusive
-- waiter p_successor when it waits, ahead of earlier ones, and else to the first live waiter. A new
-- function: the library's user needs no new grant (a function runs with its definer's rights).
CREATE OR REPLACE FUNCTION `{prefix}release_handing_to`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_token BIGINT,
  p_successor VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin)
RETURNS VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_seq BIGINT DEFAULT NULL;
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_ttl_ms BIGINT;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_seq = NULL;
  DELETE FROM `{prefix}locks` WHERE name = p_name AND owner = p_owner AND token = p_token;
  IF ROW_COUNT() = 0 THEN
    RETURN NULL;
  END IF;
  SELECT seq, owner, ttl_ms INTO v_seq, v_owner, v_ttl_ms FROM `{prefix}waiters`
  WHERE name = p_name AND kind = 'exclusive' AND expires_at > v_now
  ORDER BY owner = p_successor DESC, seq LIMIT 1 FOR UPDATE;
  IF v_seq IS NULL THEN
    RETURN '';
  END IF;
  DELETE FROM `{prefix}waiters` WHERE name = p_name AND seq = v_seq;
  INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
  VALUES (p_name, v_owner, 1, `{prefix}draw_token`(p_name), v_now, v_now + INTERVAL (v_ttl_ms * 1000) MICROSECOND, 0);
  RETURN v_owner;
END;
