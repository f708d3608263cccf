-- dblock schema version 15 for MySQL/MariaDB: the fence of a group's member reads the clock once it
-- holds the group's row, not before it waits for it (see
-- migrations/postgres/0015_fence_clock_after_locks.sql; the reading is 0014's: UTC_TIMESTAMP(6) plus
-- the time since the statement started). A member whose lease ended while fence_member (0010)
-- waited for its group's row, and whose place was given to another meanwhile, passed the fence.
-- Function re-defined only: no new grant.
CREATE OR REPLACE FUNCTION `{prefix}fence_member`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_kind VARCHAR(8) CHARACTER SET ascii,
  p_token BIGINT)
RETURNS BIGINT NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6);
  DECLARE v_epoch BIGINT DEFAULT NULL;
  DECLARE v_group_expires DATETIME(6) DEFAULT NULL;
  DECLARE v_left_us BIGINT DEFAULT NULL;
  DECLARE v_message VARCHAR(128);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_left_us = NULL;
  SELECT token, expires_at INTO v_epoch, v_group_expires FROM `{prefix}locks`
  WHERE name = p_name AND owner = IF(p_kind = 'permit', '(permits)', IF(p_kind = 'shared', '(readers)', NULL))
  LOCK IN SHARE MODE;
  SET v_now = UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND;
  IF v_epoch IS NOT NULL AND v_group_expires > v_now THEN
    SELECT TIMESTAMPDIFF(MICROSECOND, v_now, expires_at) INTO v_left_us FROM `{prefix}holders`
    WHERE name = p_name AND owner = p_owner AND kind = p_kind AND token = p_token AND epoch = v_epoch
      AND expires_at > v_now AND count > 0
    LOCK IN SHARE MODE;
  END IF;
  IF v_left_us IS NULL THEN
    SET v_message = LEFT(CONCAT('dblock fence: token ', p_token, ' is not a live member of lock ', JSON_QUOTE(p_name)), 128);
    SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 32001, MESSAGE_TEXT = v_message;
  END IF;
  SET SESSION idle_transaction_timeout = GREATEST(1, CEIL(v_left_us / 1000000));
  RETURN v_left_us;
END;
