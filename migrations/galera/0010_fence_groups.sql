-- dblock schema version 10 for MariaDB Galera clusters: as migrations/mysql/0010_fence_groups.sql
-- (fence_begin, fence_member; doc/sql-contract.md), with Galera's difference for the member's fence
-- as for the plain one in 0009: row locks are node-local and a transaction BF-aborted after
-- certification is replayed, so fence_member also writes the group's row (acquired_at moves by one
-- microsecond, back and forth), putting it into the transaction's write set: of the fenced
-- transaction and a takeover, revocation, reap or forced release of the name, or any change to the
-- group's members, on any node, certification commits only the first and fails the other (1213).
-- The price: on Galera, fences of members of one group exclude each other (on the fence's node the
-- group's row is locked exclusively, across nodes certification fails one of two concurrent ones).
--
-- CALL `<prefix>fence_begin`(name, token) starts the transaction and runs the fence in it, in one
-- round trip; the transaction stays open after the CALL, which answers the lease left (µs).
CREATE OR REPLACE PROCEDURE `{prefix}fence_begin`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_token BIGINT)
MODIFIES SQL DATA
BEGIN
  START TRANSACTION;
  SELECT `{prefix}fence`(p_name, p_token) AS lease_left_us;
END;

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
  FOR UPDATE;
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
  UPDATE `{prefix}locks`
  SET acquired_at = IF(MICROSECOND(acquired_at) % 2 = 0, acquired_at + INTERVAL 1 MICROSECOND,
                       acquired_at - INTERVAL 1 MICROSECOND)
  WHERE name = p_name;
  SET SESSION idle_transaction_timeout = GREATEST(1, CEIL(v_left_us / 1000000));
  RETURN v_left_us;
END;
