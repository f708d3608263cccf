-- dblock schema version 9 for MariaDB Galera clusters: the fence (see migrations/mysql/0009_fence.sql
-- and doc/sql-contract.md), with one difference. A row lock is node-local on Galera: a takeover on
-- another node does not wait for it, and a transaction BF-aborted after certification is replayed,
-- so a share lock alone would let a stale write commit after the next holder's grant. Here the fence
-- also writes the lock row (acquired_at moves by one microsecond, back and forth), which puts the
-- row into the transaction's write set: of the fenced transaction and a takeover, revocation, reap
-- or forced release of the row on any node, certification commits only the first and fails the
-- other (1213, transient). On the fence's own node the row lock is exclusive, so fenced
-- transactions of one holder on one node run one at a time. Signals, timeouts and the return value
-- as in the MySQL set.
CREATE OR REPLACE FUNCTION `{prefix}fence`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_token BIGINT)
RETURNS BIGINT NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_left_us BIGINT DEFAULT NULL;
  DECLARE v_message VARCHAR(128);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_left_us = NULL;
  SELECT TIMESTAMPDIFF(MICROSECOND, v_now, expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND) INTO v_left_us FROM `{prefix}locks`
  WHERE name = p_name AND token = p_token AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now
    AND owner NOT LIKE '(revoked)%' AND owner NOT LIKE '(min-hold)%' AND owner NOT IN ('(permits)', '(readers)')
  FOR UPDATE;
  IF v_left_us IS NULL THEN
    SET v_message = LEFT(CONCAT('dblock fence: token ', p_token, ' is not the live holder of lock ', JSON_QUOTE(p_name)), 128);
    SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 32001, MESSAGE_TEXT = v_message;
  END IF;
  UPDATE `{prefix}locks`
  SET acquired_at = IF(MICROSECOND(acquired_at) % 2 = 0, acquired_at + INTERVAL 1 MICROSECOND,
                       acquired_at - INTERVAL 1 MICROSECOND)
  WHERE name = p_name;
  SET SESSION idle_transaction_timeout = GREATEST(1, CEIL(v_left_us / 1000000));
  RETURN v_left_us;
END;
