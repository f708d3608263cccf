-- dblock schema version 1 for MariaDB Galera clusters: the lock table, each name's fencing-token
-- counter, and the acquire and release functions, in the database named by the URI; the migrator
-- fills the table prefix placeholder (validated as [a-z_][a-z0-9_]*). This set starts where the
-- plain MySQL/MariaDB set ends after version 3 (migrations/mysql), except for the token source.
-- DDL is not transactional here: every statement can run again (IF NOT EXISTS, OR REPLACE), so a
-- migration that failed part-way is finished by `dblock migrate repair` and `dblock migrate up`.

-- Fencing tokens. Galera refuses a cached sequence, and a NOCACHE one hands out the same values on
-- two nodes (doc/database-facts.md). So each name's last token lives in a row of its own that
-- outlives the lock row, and a grant increments it in the acquiring statement. Two nodes granting
-- one name both write its lock row: certification lets only the first commit (the other fails with
-- 1213 and is retried), so a name's tokens rise in grant order across the cluster. A row stays per
-- name ever locked (a few dozen bytes each).
CREATE TABLE IF NOT EXISTS `{prefix}tokens` (
  name  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
  token BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

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

-- What the library calls: insert, re-enter or take over in one statement, with one clock reading
-- (v_now), given the token of the grant the caller already holds (0 for none). As MySQL's version
-- 3 (migrations/mysql/0003_lease_safety.sql explains each assignment); a grant (token 0 after the
-- upsert) increments the name's counter row.
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
    INSERT INTO `{prefix}tokens` (name, token) VALUES (p_name, 1) ON DUPLICATE KEY UPDATE token = token + 1;
    SELECT token INTO v_token FROM `{prefix}tokens` WHERE name = p_name;
    UPDATE `{prefix}locks` SET token = v_token WHERE name = p_name;
  END IF;
  RETURN CONCAT(v_count, ' ', v_token);
END;

-- For other languages: acquire_held with the token of the caller's own row, so it re-enters that
-- row. (The row is read in a statement of its own: a statement that reads the table may not call a
-- function that writes it, error 1442.)
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
