-- dblock schema version 1 for MySQL/MariaDB: the lock table, the fencing-token sequence and the
-- acquire and release functions, in the database named by the URI; the migrator fills the table
-- prefix placeholder (validated as [a-z_][a-z0-9_]*).
-- DDL is not transactional here: every statement can run again (IF NOT EXISTS, OR REPLACE), so a
-- migration that failed part-way is finished by `dblock migrate repair` and `dblock migrate up`.

-- A SEQUENCE (MariaDB 10.3+) survives row deletion. Its cache is shared by all sessions (unlike
-- PostgreSQL's per-session cache), so cached values still follow grant order, and a draw costs no
-- write of the sequence row; a server restart only skips the rest of the cache.
CREATE SEQUENCE IF NOT EXISTS `{prefix}token_seq` CACHE 1000;

-- utf8mb4_nopad_bin: names compare byte for byte, 'a', 'A' and 'a ' are three locks.
CREATE TABLE IF NOT EXISTS `{prefix}locks` (
  name        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
  owner       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  count       INT NOT NULL,
  token       BIGINT NOT NULL,
  acquired_at DATETIME(6) NOT NULL,
  expires_at  DATETIME(6) NOT NULL,
  KEY `{prefix}locks_expires_at` (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Insert, re-enter or take over in one statement, returning 'count token', or NULL when another
-- owner holds a live lease. A fresh row is inserted with token 0 and draws its token afterwards,
-- while this statement holds the row lock: a token drawn in VALUES would be drawn before the
-- uniqueness check (STACK-NOTES 4.1). ON DUPLICATE KEY UPDATE assigns left to right, so every
-- condition reads only owner and expires_at, and those two are assigned last.
-- Times are UTC_TIMESTAMP(6) (the session time zone does not matter), fixed for the statement.
-- Affected rows of the upsert (no CLIENT_FOUND_ROWS): 1 inserted, 2 re-entered or taken over, 0
-- held by another owner. (No comments inside the bodies: the mysql client strips them, and the
-- stored definition would then differ from what `dblock migrate up` installs.)
CREATE OR REPLACE FUNCTION `{prefix}acquire`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_ttl_us BIGINT)
RETURNS VARCHAR(64) CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_changed INT;
  DECLARE v_count INT;
  DECLARE v_token BIGINT;
  INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at)
  VALUES (p_name, p_owner, 1, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL p_ttl_us MICROSECOND)
  ON DUPLICATE KEY UPDATE
    count       = IF(owner = VALUES(owner) AND expires_at > UTC_TIMESTAMP(6), count + 1,
                     IF(expires_at <= UTC_TIMESTAMP(6), 1, count)),
    token       = IF(owner = VALUES(owner) AND expires_at > UTC_TIMESTAMP(6), token,
                     IF(expires_at <= UTC_TIMESTAMP(6), NEXTVAL(`{prefix}token_seq`), token)),
    acquired_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(acquired_at), acquired_at),
    owner       = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(owner), owner),
    expires_at  = IF(owner = VALUES(owner), VALUES(expires_at), expires_at);
  SET v_changed = ROW_COUNT();
  IF v_changed = 0 THEN
    RETURN NULL;
  END IF;
  IF v_changed = 1 THEN
    UPDATE `{prefix}locks` SET token = NEXTVAL(`{prefix}token_seq`) WHERE name = p_name;
  END IF;
  SELECT count, token INTO v_count, v_token FROM `{prefix}locks` WHERE name = p_name;
  RETURN CONCAT(v_count, ' ', v_token);
END;

-- Release one level: the row is deleted at zero. Returns the count left, or NULL when the row
-- does not carry this owner and token (nothing is changed then).
CREATE OR REPLACE FUNCTION `{prefix}release`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_token BIGINT)
RETURNS BIGINT NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_count BIGINT;
  DELETE FROM `{prefix}locks` WHERE name = p_name AND owner = p_owner AND token = p_token AND count <= 1;
  IF ROW_COUNT() > 0 THEN
    RETURN 0;
  END IF;
  UPDATE `{prefix}locks` SET count = count - 1 WHERE name = p_name AND owner = p_owner AND token = p_token AND count > 1;
  IF ROW_COUNT() = 0 THEN
    RETURN NULL;
  END IF;
  SELECT count INTO v_count FROM `{prefix}locks` WHERE name = p_name;
  RETURN v_count;
END;
