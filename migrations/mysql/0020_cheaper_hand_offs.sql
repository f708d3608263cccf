-- dblock schema version 20 for MySQL/MariaDB (and Galera, which reads this same file): a name's
-- arrival counter (waiter_counters, 0018) no longer stays forever once nobody waits for the name.
-- wait_turn now notes when it last drew from a counter (touched_at), and the reaper deletes the
-- counter of a name that has no waiter row and was not drawn from for ten minutes: the next waiter
-- of that name starts again at 1, which orders it before nobody. A draw in flight keeps its counter:
-- it holds the counter's row lock until it commits, and the reaper's DELETE, waiting for that lock,
-- then reads the row as committed (drawn from just now). A counter of schema 18 or 19 has no
-- touched_at: it counts as idle. The body is 0018's with that one statement changed. (PostgreSQL's
-- migration 0020 makes the queue's other changes; InnoDB's flush at commit is
-- innodb_flush_log_at_trx_commit, which a function cannot lower for one transaction.) Needs the
-- ALTER right, as 0019's columns did; no comment inside a function's body (the mariadb client
-- drops it).
ALTER TABLE `{prefix}waiter_counters` ADD COLUMN touched_at DATETIME(6) NULL;

CREATE OR REPLACE FUNCTION `{prefix}wait_turn`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_ttl_us BIGINT,
  p_waiter_ttl_us BIGINT,
  p_seq BIGINT)
RETURNS VARCHAR(96) CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_seq BIGINT DEFAULT p_seq;
  DECLARE v_first BIGINT;
  DECLARE v_mine INT;
  DECLARE v_token BIGINT;
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  IF p_seq > 0 THEN
    SELECT COUNT(*) INTO v_mine FROM `{prefix}waiters` WHERE name = p_name AND seq = p_seq AND owner = p_owner;
    IF v_mine = 0 THEN
      RETURN CONCAT('0 ', `{prefix}grant_of`(p_name, p_owner, v_now));
    END IF;
    UPDATE `{prefix}waiters` SET expires_at = GREATEST(expires_at, v_now + INTERVAL p_waiter_ttl_us MICROSECOND)
    WHERE name = p_name AND seq = p_seq AND owner = p_owner;
  END IF;
  SELECT MIN(seq) INTO v_first FROM `{prefix}waiters`
  WHERE name = p_name AND kind = 'exclusive' AND expires_at > v_now;
  IF (v_first IS NULL OR v_first = p_seq) AND `{prefix}lease_left_ms`(p_name, v_now) = 0 THEN
    SET v_token = `{prefix}draw_token`(p_name);
    INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
    VALUES (p_name, p_owner, 1, v_token, v_now, v_now + INTERVAL p_ttl_us MICROSECOND, 0)
    ON DUPLICATE KEY UPDATE
      owner         = IF(expires_at <= v_now, VALUES(owner), owner),
      count         = IF(expires_at <= v_now, 1, count),
      token         = IF(expires_at <= v_now, VALUES(token), token),
      acquired_at   = IF(expires_at <= v_now, VALUES(acquired_at), acquired_at),
      lock_delay_ms = IF(expires_at <= v_now, 0, lock_delay_ms),
      expires_at    = IF(expires_at <= v_now, VALUES(expires_at), expires_at);
    SELECT MAX(owner) INTO v_owner FROM `{prefix}locks` WHERE name = p_name AND token = v_token;
    IF v_owner = p_owner THEN
      DELETE FROM `{prefix}waiters` WHERE name = p_name AND owner = p_owner AND kind = 'exclusive';
      RETURN CONCAT('0 1 ', v_token, ' ', p_ttl_us DIV 1000);
    END IF;
  END IF;
  IF p_seq = 0 THEN
    INSERT INTO `{prefix}waiter_counters` (name, last_seq, touched_at) VALUES (p_name, 1, v_now)
    ON DUPLICATE KEY UPDATE last_seq = last_seq + 1, touched_at = v_now;
    SELECT MAX(last_seq) INTO v_seq FROM `{prefix}waiter_counters` WHERE name = p_name;
    DELETE FROM `{prefix}waiters` WHERE name = p_name AND owner = p_owner AND kind = 'exclusive';
    INSERT INTO `{prefix}waiters` (name, seq, owner, kind, ttl_ms, queued_at, expires_at)
    VALUES (p_name, v_seq, p_owner, 'exclusive', p_ttl_us DIV 1000, v_now,
            v_now + INTERVAL p_waiter_ttl_us MICROSECOND);
  END IF;
  RETURN CONCAT(v_seq, ' 0 0 ', `{prefix}lease_left_ms`(p_name, v_now));
END;
