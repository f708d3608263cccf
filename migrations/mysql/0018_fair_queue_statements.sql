-- dblock schema version 18 for MySQL/MariaDB (and Galera, which reads this same file): the fair
-- queue's statements (doc/fair-queue.md) over 0017's tables. A waiter's turn and the release that
-- hands a name on are functions, each one statement, one round trip and one commit; the waiter's
-- look, its leave and the reaper's delete are plain statements (src/backends/mysql/my_queue.cpp).
--
-- Arrival order is a per-name counter row (waiter_counters, written under its row lock; a cluster
-- certifies it, where AUTO_INCREMENT would interleave per node). Tokens come from each dialect's
-- draw_token (0004), as for every other grant. MariaDB sends no notifications: a queued waiter polls
-- with its back-off, and reads its grant at its next look. The hand-off locks the waiter row it
-- grants (FOR UPDATE), so a leave (a DELETE of that row) waits for it and then finds nothing, or
-- deletes the row first and the hand-off passes to the next live waiter. In these functions every
-- read of a table the function writes is a locking read (MariaDB 10.11), so each sees the newest
-- committed rows: a release that committed a moment ago is seen, never an older snapshot. The clock
-- is the statement's start (a stored function's UTC_TIMESTAMP(6)): a lease granted here is counted
-- from before the grant's commit, so it ends no later than the database says. Functions only: the
-- library's user needs EXECUTE on them (`dblock migrate grants`). (No comment inside a function's
-- body: the mariadb client drops it.)

-- The name's row as the queue reads it, locking nothing (a read in a function that writes the table
-- would be a locking read, and would wait for a fenced transaction's lock on the row, 0016):
-- lease_left_ms, the milliseconds until the name's row ends (lock-delay included; 0 for no live
-- row); grant_of, "count token left_ms" of p_owner's live row, NULL for none.
CREATE OR REPLACE FUNCTION `{prefix}lease_left_ms`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_now DATETIME(6))
RETURNS BIGINT NOT DETERMINISTIC READS SQL DATA
BEGIN
  RETURN COALESCE((SELECT GREATEST(FLOOR(TIMESTAMPDIFF(MICROSECOND, p_now, expires_at) / 1000), 0)
                   FROM `{prefix}locks` WHERE name = p_name), 0);
END;

CREATE OR REPLACE FUNCTION `{prefix}grant_of`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_now DATETIME(6))
RETURNS VARCHAR(64) CHARACTER SET ascii NOT DETERMINISTIC READS SQL DATA
BEGIN
  RETURN (SELECT CONCAT(count, ' ', token, ' ', FLOOR(TIMESTAMPDIFF(MICROSECOND, p_now, expires_at) / 1000))
          FROM `{prefix}locks` WHERE name = p_name AND owner = p_owner AND expires_at > p_now);
END;

-- p_seq = 0: a new arrival takes the name when it is free and nobody live waits, else queues behind
-- every earlier waiter (an earlier row of the same owner goes). p_seq > 0: the queued waiter renews
-- its waiter lease and takes the name when it is free and it is the first live waiter. Returns
-- "seq count token left_ms": queued "seq 0 0 holder_left_ms" (0 when no row is live), granted
-- "0 count token lease_left_ms"; NULL when p_seq's row is gone and no grant is the caller's. The
-- upsert that takes a free name changes only a row whose lease ended (expires_at, assigned last:
-- ON DUPLICATE KEY UPDATE assigns left to right); the token tells whether it did.
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
    INSERT INTO `{prefix}waiter_counters` (name, last_seq) VALUES (p_name, 1)
    ON DUPLICATE KEY UPDATE last_seq = last_seq + 1;
    SELECT MAX(last_seq) INTO v_seq FROM `{prefix}waiter_counters` WHERE name = p_name;
    DELETE FROM `{prefix}waiters` WHERE name = p_name AND owner = p_owner AND kind = 'exclusive';
    INSERT INTO `{prefix}waiters` (name, seq, owner, kind, ttl_ms, queued_at, expires_at)
    VALUES (p_name, v_seq, p_owner, 'exclusive', p_ttl_us DIV 1000, v_now,
            v_now + INTERVAL p_waiter_ttl_us MICROSECOND);
  END IF;
  RETURN CONCAT(v_seq, ' 0 0 ', `{prefix}lease_left_ms`(p_name, v_now));
END;

-- The last-level release of (p_name, p_owner, p_token), handing the name to the first live
-- exclusive waiter in the same commit: NULL when the row does not carry that owner and token
-- (nothing changed), '' when nobody live waits (the name is free), else the owner granted.
CREATE OR REPLACE FUNCTION `{prefix}release_handing_off`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_token BIGINT)
RETURNS VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_seq BIGINT DEFAULT NULL;
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_ttl_ms BIGINT;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_seq = NULL;
  DELETE FROM `{prefix}locks` WHERE name = p_name AND owner = p_owner AND token = p_token;
  IF ROW_COUNT() = 0 THEN
    RETURN NULL;
  END IF;
  SELECT seq, owner, ttl_ms INTO v_seq, v_owner, v_ttl_ms FROM `{prefix}waiters`
  WHERE name = p_name AND kind = 'exclusive' AND expires_at > v_now
  ORDER BY seq LIMIT 1 FOR UPDATE;
  IF v_seq IS NULL THEN
    RETURN '';
  END IF;
  DELETE FROM `{prefix}waiters` WHERE name = p_name AND seq = v_seq;
  INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
  VALUES (p_name, v_owner, 1, `{prefix}draw_token`(p_name), v_now, v_now + INTERVAL (v_ttl_ms * 1000) MICROSECOND, 0);
  RETURN v_owner;
END;
