-- dblock schema version 10 for MySQL/MariaDB: the fence in one round trip, and fences of group
-- members (doc/semantics.md "Fence", doc/sql-contract.md). <prefix>fence(name, token) is unchanged.
--
-- CALL `<prefix>fence_begin`(name, token) starts the transaction and runs the fence in it, as
-- START TRANSACTION followed by SELECT `<prefix>fence`(name, token) would, in one statement: the
-- transaction stays open after the CALL, which answers one row, the lease left in microseconds.
-- When refused it signals as the fence does, with the transaction open: roll back.
CREATE OR REPLACE PROCEDURE `{prefix}fence_begin`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_token BIGINT)
MODIFIES SQL DATA
BEGIN
  START TRANSACTION;
  SELECT `{prefix}fence`(p_name, p_token) AS lease_left_us;
END;

-- SELECT `<prefix>fence_member`(name, owner, kind, token), kind 'permit' or 'shared': the fence of
-- a group's member (a permit of a semaphore, a reader of a read-write lock). Returns only when that
-- membership (the holders row of name, owner and kind, with that token) is live by
-- UTC_TIMESTAMP(6) and belongs to the group that holds the name now, and locks the group's row,
-- then the member's row, in share mode: fences of members do not block each other, while a
-- takeover, reap, revocation or forced release of the name and any acquisition, release or renewal
-- of the group's members (they all write the group's row) wait for the transaction to end.
-- Otherwise it signals SQLSTATE 45000 with MYSQL_ERRNO 32001 (`dblock fence: token T is not a live
-- member of lock "NAME"`). Sets idle_transaction_timeout to the member's lease left, rounded up to
-- whole seconds, as the fence does, and returns that lease in microseconds.
CREATE OR REPLACE FUNCTION `{prefix}fence_member`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_kind VARCHAR(8) CHARACTER SET ascii,
  p_token BIGINT)
RETURNS BIGINT NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_epoch BIGINT DEFAULT NULL;
  DECLARE v_left_us BIGINT DEFAULT NULL;
  DECLARE v_message VARCHAR(128);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_left_us = NULL;
  SELECT token INTO v_epoch FROM `{prefix}locks`
  WHERE name = p_name AND owner = IF(p_kind = 'permit', '(permits)', IF(p_kind = 'shared', '(readers)', NULL))
    AND expires_at > v_now
  LOCK IN SHARE MODE;
  IF v_epoch IS NOT NULL THEN
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
