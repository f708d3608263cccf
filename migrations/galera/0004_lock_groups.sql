-- dblock schema version 4 for MariaDB Galera clusters: groups of holders of one name (permits of a
-- counting semaphore, readers of a read-write lock) and waiting writers, as in
-- migrations/mysql/0004_lock_groups.sql, which explains the design; only the token source differs.
-- Every grant writes the name's lock row, so two nodes admitting members of one group at once
-- conflict at certification, and one of them is retried: a group's capacity holds across nodes.

-- Tokens come from the name's counter row of version 1, incremented while the name's row is locked.
CREATE OR REPLACE FUNCTION `{prefix}draw_token`(p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin)
RETURNS BIGINT NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_token BIGINT;
  INSERT INTO `{prefix}tokens` (name, token) VALUES (p_name, 1) ON DUPLICATE KEY UPDATE token = token + 1;
  SELECT token INTO v_token FROM `{prefix}tokens` WHERE name = p_name;
  RETURN v_token;
END;

CREATE TABLE IF NOT EXISTS `{prefix}holders` (
  name        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  owner       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  kind        VARCHAR(8) CHARACTER SET ascii NOT NULL,
  count       INT NOT NULL,
  token       BIGINT NOT NULL,
  epoch       BIGINT NOT NULL,
  acquired_at DATETIME(6) NOT NULL,
  expires_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (name, owner, kind),
  KEY `{prefix}holders_expires_at` (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Takes a permit ('permit', at most p_capacity members) or a read lock ('shared', refused while a
-- writer waits), or re-enters the caller's membership (p_held_token: its token, 0 for none), in one
-- statement with one clock reading. Returns 'count token', or NULL when refused. The upsert locks
-- the name's row first (inserting a placeholder with token 0 when there is none); the aggregates
-- read a membership that may not exist without raising "no data".
CREATE OR REPLACE FUNCTION `{prefix}acquire_member`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_kind VARCHAR(8) CHARACTER SET ascii,
  p_capacity BIGINT,
  p_ttl_us BIGINT,
  p_held_token BIGINT)
RETURNS VARCHAR(64) CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_expires DATETIME(6) DEFAULT v_now + INTERVAL p_ttl_us MICROSECOND;
  DECLARE v_group VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin
    DEFAULT IF(p_kind = 'permit', '(permits)', '(readers)');
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_epoch BIGINT;
  DECLARE v_row_expires DATETIME(6);
  DECLARE v_free BOOLEAN;
  DECLARE v_count INT;
  DECLARE v_token BIGINT;
  DECLARE v_member_epoch BIGINT;
  DECLARE v_member_expires DATETIME(6);
  IF p_kind NOT IN ('permit', 'shared') THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'acquire_member: kind must be permit or shared';
  END IF;
  INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at)
  VALUES (p_name, v_group, 1, 0, v_now, v_expires)
  ON DUPLICATE KEY UPDATE count = count;
  SELECT owner, token, expires_at INTO v_owner, v_epoch, v_row_expires
  FROM `{prefix}locks` WHERE name = p_name FOR UPDATE;
  SET v_free = v_epoch = 0 OR v_row_expires <= v_now;
  IF NOT v_free AND v_owner <> v_group THEN
    RETURN NULL;
  END IF;
  IF NOT v_free THEN
    SELECT MAX(count), MAX(token), MAX(epoch), MAX(expires_at)
    INTO v_count, v_token, v_member_epoch, v_member_expires
    FROM `{prefix}holders` WHERE name = p_name AND owner = p_owner AND kind = p_kind;
    IF v_count IS NOT NULL AND p_held_token <> 0 AND v_token = p_held_token AND v_member_epoch = v_epoch
       AND v_member_expires > v_now THEN
      UPDATE `{prefix}holders` SET count = count + 1, expires_at = GREATEST(expires_at, v_expires)
      WHERE name = p_name AND owner = p_owner AND kind = p_kind;
      UPDATE `{prefix}locks` SET expires_at = GREATEST(expires_at, v_expires) WHERE name = p_name;
      RETURN CONCAT(v_count + 1, ' ', v_token);
    END IF;
    IF p_kind = 'permit' AND (SELECT COUNT(*) FROM `{prefix}holders`
                              WHERE name = p_name AND kind = 'permit' AND epoch = v_epoch AND expires_at > v_now
                                AND owner <> p_owner) >= p_capacity THEN
      RETURN NULL;
    END IF;
  END IF;
  IF p_kind = 'shared' AND EXISTS (SELECT 1 FROM `{prefix}holders`
                                   WHERE name = p_name AND kind = 'writer' AND expires_at > v_now AND owner <> p_owner) THEN
    IF v_epoch = 0 THEN
      DELETE FROM `{prefix}locks` WHERE name = p_name;
    END IF;
    RETURN NULL;
  END IF;
  IF NOT v_free THEN
    SET v_token = IF(p_kind = 'permit', `{prefix}draw_token`(p_name), v_epoch);
    UPDATE `{prefix}locks` SET count = count + 1, expires_at = GREATEST(expires_at, v_expires) WHERE name = p_name;
  ELSE
    SET v_epoch = `{prefix}draw_token`(p_name);
    SET v_token = v_epoch;
    UPDATE `{prefix}locks` SET owner = v_group, count = 1, token = v_epoch, acquired_at = v_now, expires_at = v_expires
    WHERE name = p_name;
    DELETE FROM `{prefix}holders` WHERE name = p_name AND kind <> 'writer';
  END IF;
  INSERT INTO `{prefix}holders` (name, owner, kind, count, token, epoch, acquired_at, expires_at)
  VALUES (p_name, p_owner, p_kind, 1, v_token, v_epoch, v_now, v_expires)
  ON DUPLICATE KEY UPDATE count = 1, token = VALUES(token), epoch = VALUES(epoch), acquired_at = VALUES(acquired_at),
                          expires_at = VALUES(expires_at);
  RETURN CONCAT(1, ' ', v_token);
END;

-- Gives back one level of a membership: 'left freed' (freed 1 when a member left, so that a waiter
-- may be granted), or NULL when the membership is no longer the caller's. The group's row goes with
-- its last live member; otherwise its lease shrinks to the latest lease still live.
CREATE OR REPLACE FUNCTION `{prefix}release_member`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_kind VARCHAR(8) CHARACTER SET ascii,
  p_token BIGINT)
RETURNS VARCHAR(64) CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_group VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin
    DEFAULT IF(p_kind = 'permit', '(permits)', '(readers)');
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_epoch BIGINT;
  DECLARE v_count INT;
  DECLARE v_member_epoch BIGINT;
  DECLARE v_live BIGINT;
  DECLARE v_latest DATETIME(6);
  SELECT MAX(owner), MAX(token) INTO v_owner, v_epoch FROM `{prefix}locks` WHERE name = p_name FOR UPDATE;
  SELECT MAX(count), MAX(epoch) INTO v_count, v_member_epoch FROM `{prefix}holders`
  WHERE name = p_name AND owner = p_owner AND kind = p_kind AND token = p_token;
  IF v_count IS NULL THEN
    RETURN NULL;
  END IF;
  IF v_owner IS NULL OR v_epoch <> v_member_epoch OR v_owner <> v_group THEN
    DELETE FROM `{prefix}holders` WHERE name = p_name AND owner = p_owner AND kind = p_kind;
    RETURN NULL;
  END IF;
  IF v_count > 1 THEN
    UPDATE `{prefix}holders` SET count = count - 1 WHERE name = p_name AND owner = p_owner AND kind = p_kind;
    RETURN CONCAT(v_count - 1, ' 0');
  END IF;
  DELETE FROM `{prefix}holders` WHERE name = p_name AND owner = p_owner AND kind = p_kind;
  SELECT COUNT(*), MAX(expires_at) INTO v_live, v_latest FROM `{prefix}holders`
  WHERE name = p_name AND kind = p_kind AND epoch = v_epoch AND expires_at > v_now;
  IF v_live = 0 THEN
    DELETE FROM `{prefix}locks` WHERE name = p_name;
  ELSE
    UPDATE `{prefix}locks` SET count = v_live, expires_at = v_latest WHERE name = p_name;
  END IF;
  RETURN '0 1';
END;

-- Renews memberships still live in a live group, never shortening a lease, and their groups' rows
-- with them. p_held: [[name, owner, kind, token, ttl_us], ...]. Returns the 0-based positions
-- renewed, comma-separated. Groups' rows are locked in name order, before their members.
CREATE OR REPLACE FUNCTION `{prefix}renew_members`(p_held LONGTEXT)
RETURNS LONGTEXT CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_done BOOLEAN DEFAULT FALSE;
  DECLARE v_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_kind VARCHAR(8) CHARACTER SET ascii;
  DECLARE v_token BIGINT;
  DECLARE v_ttl_us BIGINT;
  DECLARE v_position BIGINT;
  DECLARE v_epoch BIGINT;
  DECLARE v_found BIGINT;
  DECLARE v_expires DATETIME(6);
  DECLARE v_renewed LONGTEXT CHARACTER SET ascii DEFAULT '';
  DECLARE held CURSOR FOR
    SELECT h.name, h.owner, h.kind, h.token, h.ttl_us, h.position FROM JSON_TABLE(p_held, '$[*]' COLUMNS (
      name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]',
      owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[1]',
      kind VARCHAR(8) CHARACTER SET ascii PATH '$[2]',
      token BIGINT PATH '$[3]',
      ttl_us BIGINT PATH '$[4]',
      position FOR ORDINALITY)) h
    ORDER BY h.name;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;
  OPEN held;
  renewing: LOOP
    FETCH held INTO v_name, v_owner, v_kind, v_token, v_ttl_us, v_position;
    IF v_done THEN
      LEAVE renewing;
    END IF;
    SELECT MAX(token) INTO v_epoch FROM `{prefix}locks`
    WHERE name = v_name AND owner = IF(v_kind = 'permit', '(permits)', '(readers)') AND expires_at > v_now FOR UPDATE;
    SELECT COUNT(*) INTO v_found FROM `{prefix}holders`
    WHERE name = v_name AND owner = v_owner AND kind = v_kind AND token = v_token AND epoch = v_epoch
      AND expires_at > v_now;
    IF v_found > 0 THEN
      SET v_expires = v_now + INTERVAL v_ttl_us MICROSECOND;
      UPDATE `{prefix}holders` SET expires_at = GREATEST(expires_at, v_expires)
      WHERE name = v_name AND owner = v_owner AND kind = v_kind;
      UPDATE `{prefix}locks` SET expires_at = GREATEST(expires_at, v_expires) WHERE name = v_name;
      SET v_renewed = CONCAT(v_renewed, IF(v_renewed = '', '', ','), v_position - 1);
    END IF;
  END LOOP;
  CLOSE held;
  RETURN v_renewed;
END;
