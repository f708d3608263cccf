-- dblock schema version 13 for MySQL/MariaDB (and Galera, which reads this same file): every
-- reader's membership has a token of its own. A reader's token was its group's epoch, so a
-- membership that lapsed, was deleted by the reaper and was taken afresh by its owner came back
-- under the same token, and a release or give-back of the old one still in flight (a statement
-- stalled for longer than a lease) deleted the new one under the guards that believed it. Now a
-- reader that joins a group draws a token, as a permit holder does; the group's first reader's is
-- the epoch, drawn then. Its own membership row of the same group taken afresh keeps its token and
-- count (0012), so the levels still to be released stay counted; that row is read FOR UPDATE, since
-- the reaper deletes lapsed members without the group's row, and a row it deleted after the read
-- would be inserted anew under the kept token. The epoch stays the group's: fence_member (0010) and
-- the group row still go by it. 0012's acquire_member re-defined with those changes (the kept token
-- is v_token, read with v_count and v_member_epoch from the owner's row; no comment inside the body,
-- which the mariadb client strips from a script applied by hand).
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
