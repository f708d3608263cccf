-- dblock schema version 9 for MySQL/MariaDB: the fence, called inside the application's own
-- transaction (see migrations/postgres/0009_fence.sql and doc/sql-contract.md).
--
-- SELECT `<prefix>fence`(name, token) as the transaction's first statement returns only when
-- `token` is the live holder of `name` by UTC_TIMESTAMP(6) (not a revoked, min-hold or group
-- row), and locks the lock row in share mode: a takeover, the reaper, a revocation or a forced
-- release of that row needs an exclusive row lock, so none of them can commit before this
-- transaction ends. Otherwise it signals SQLSTATE 45000 with MYSQL_ERRNO 32001, and the caller
-- rolls back. It then sets the session's idle_transaction_timeout (MariaDB 10.3+, whole seconds)
-- to the lease left rounded up, so the server ends a connection paused inside the transaction at
-- most one second after its lease ends. That setting is the SESSION's: it outlives the
-- transaction (dblock's own sessions set it back; an application resets it or calls the fence
-- again). Returns the lease left in microseconds.
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
  LOCK IN SHARE MODE;
  IF v_left_us IS NULL THEN
    SET v_message = LEFT(CONCAT('dblock fence: token ', p_token, ' is not the live holder of lock ', JSON_QUOTE(p_name)), 128);
    SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 32001, MESSAGE_TEXT = v_message;
  END IF;
  SET SESSION idle_transaction_timeout = GREATEST(1, CEIL(v_left_us / 1000000));
  RETURN v_left_us;
END;
