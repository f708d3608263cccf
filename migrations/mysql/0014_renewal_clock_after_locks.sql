-- dblock schema version 14 for MySQL/MariaDB and Galera (one file): a renewal of group members,
-- and a re-entry of a membership, read the clock once they hold the group's row, not before they
-- wait for it (see migrations/postgres/0014_renewal_clock_after_locks.sql).
--
-- UTC_TIMESTAMP(6) inside a function is the calling statement's start (doc/database-facts.md, 9),
-- taken before any row-lock wait. renew_members (0004) and acquire_member's re-entry (0013) judged
-- a membership by that reading: one whose lease ended while the function waited for its group's
-- row, and whose place the holder of that row gave to another, was renewed or re-entered, one
-- member more than the group's capacity. The reading is now taken right after the group's row is
-- locked: UTC_TIMESTAMP(6) plus the time since the statement started (SYSDATE(6), read when it is
-- evaluated, minus NOW(6), both in the session's time zone, whichever it is). Every row is read
-- with a locking read, so the newest committed version is judged, and a member's row is updated
-- under the conditions it was found by. The group's row is read with aggregates: a name without a
-- row gives NULLs, not the NOT FOUND that would end renew_members' loop. (No comment inside a
-- function's body: the mariadb client drops it, and a script applied by hand would differ.)
-- Functions re-defined only: no new grant.
CREATE OR REPLACE FUNCTION `{prefix}renew_members`(p_held LONGTEXT)
RETURNS LONGTEXT CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6);
  DECLARE v_done BOOLEAN DEFAULT FALSE;
  DECLARE v_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_kind VARCHAR(8) CHARACTER SET ascii;
  DECLARE v_token BIGINT;
  DECLARE v_ttl_us BIGINT;
  DECLARE v_position BIGINT;
  DECLARE v_epoch BIGINT;
  DECLARE v_group_expires DATETIME(6);
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
    SELECT MAX(IF(owner = IF(v_kind = 'permit', '(permits)', '(readers)'), token, NULL)), MAX(expires_at)
      INTO v_epoch, v_group_expires
    FROM `{prefix}locks` WHERE name = v_name FOR UPDATE;
    SET v_now = UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND;
    IF v_group_expires IS NULL OR v_group_expires <= v_now THEN
      SET v_epoch = NULL;
    END IF;
    SELECT COUNT(*) INTO v_found FROM `{prefix}holders`
    WHERE name = v_name AND owner = v_owner AND kind = v_kind AND token = v_token AND epoch = v_epoch
      AND expires_at > v_now
    FOR UPDATE;
    IF v_found > 0 THEN
      SET v_expires = v_now + INTERVAL v_ttl_us MICROSECOND;
      UPDATE `{prefix}holders` SET expires_at = GREATEST(expires_at, v_expires)
      WHERE name = v_name AND owner = v_owner AND kind = v_kind AND token = v_token AND epoch = v_epoch;
      UPDATE `{prefix}locks` SET expires_at = GREATEST(expires_at, v_expires) WHERE name = v_name;
      SET v_renewed = CONCAT(v_renewed, IF(v_renewed = '', '', ','), v_position - 1);
    END IF;
  END LOOP;
  CLOSE held;
  RETURN v_renewed;
END;

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
  SET v_now = UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND;
  SET v_expires = v_now + INTERVAL p_ttl_us MICROSECOND;
  SET v_free = v_epoch = 0 OR v_row_expires <= v_now;
  IF NOT v_free AND v_owner <> v_group THEN
    RETURN NULL;
  END IF;
  IF NOT v_free THEN
    SELECT MAX(count), MAX(token), MAX(epoch), MAX(expires_at)
    INTO v_count, v_token, v_member_epoch, v_member_expires
    FROM `{prefix}holders` WHERE name = p_name AND owner = p_owner AND kind = p_kind FOR UPDATE;
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
    SET v_token = IF(p_kind = 'shared' AND v_count IS NOT NULL AND v_member_epoch = v_epoch, v_token,
                     `{prefix}draw_token`(p_name));
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
  ON DUPLICATE KEY UPDATE count = IF(token = VALUES(token), count + 1, 1), token = VALUES(token), epoch = VALUES(epoch),
                          acquired_at = VALUES(acquired_at), expires_at = GREATEST(expires_at, VALUES(expires_at));
  RETURN CONCAT(1, ' ', v_token);
END;
