-- dblock schema version 8 for MariaDB Galera clusters: lock-delay after a lost lease, as in
-- migrations/mysql/0008_lock_delay.sql (migrations/postgres/0008_lock_delay.sql explains the
-- design); the token comes from draw_token, this set's name counter. acquire_held stays as it was.

ALTER TABLE `{prefix}locks` ADD COLUMN IF NOT EXISTS lock_delay_ms BIGINT NOT NULL DEFAULT 0;

-- What the library calls: acquire_held with the lock's delay (p_delay_ms, 0 for none). A row is
-- taken over only once expires_at has passed (its delay included); the caller's own row is
-- re-entered or taken over only while its lease is live, so a holder whose lease ended waits out
-- the delay like anyone. A re-entry keeps the later lease and the longer delay. Assignments run
-- left to right (see 0003): token 0 marks a takeover for the columns after it. The caller is
-- granted when the row carries its owner and a live lease afterwards.
CREATE OR REPLACE FUNCTION `{prefix}acquire_delayed`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_ttl_us BIGINT,
  p_held_token BIGINT,
  p_delay_ms BIGINT)
RETURNS VARCHAR(64) CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_count INT;
  DECLARE v_token BIGINT;
  DECLARE v_lease_end DATETIME(6);
  INSERT INTO `{prefix}locks` (name, owner, count, token, acquired_at, expires_at, lock_delay_ms)
  VALUES (p_name, p_owner, 1, 0, v_now, v_now + INTERVAL (p_ttl_us + p_delay_ms * 1000) MICROSECOND, p_delay_ms)
  ON DUPLICATE KEY UPDATE
    count         = IF(owner = VALUES(owner) AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now
                       AND token = p_held_token, count + 1,
                       IF(expires_at <= v_now
                          OR (owner = VALUES(owner) AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now),
                          1, count)),
    acquired_at   = IF(expires_at <= v_now
                       OR (owner = VALUES(owner) AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now
                           AND token <> p_held_token),
                       VALUES(acquired_at), acquired_at),
    token         = IF(expires_at <= v_now
                       OR (owner = VALUES(owner) AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now
                           AND token <> p_held_token),
                       0, token),
    expires_at    = IF(token = 0, VALUES(expires_at),
                       IF(owner = VALUES(owner) AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now
                          AND token = p_held_token,
                          GREATEST(expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND,
                                   v_now + INTERVAL p_ttl_us MICROSECOND)
                            + INTERVAL (GREATEST(lock_delay_ms, p_delay_ms) * 1000) MICROSECOND,
                          expires_at)),
    lock_delay_ms = IF(token = 0, VALUES(lock_delay_ms),
                       IF(owner = VALUES(owner) AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now
                          AND token = p_held_token, GREATEST(lock_delay_ms, p_delay_ms), lock_delay_ms)),
    owner         = IF(token = 0, VALUES(owner), owner);
  SELECT owner, count, token, expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND
  INTO v_owner, v_count, v_token, v_lease_end FROM `{prefix}locks` WHERE name = p_name;
  IF v_owner <> p_owner OR v_lease_end <= v_now THEN
    RETURN NULL;
  END IF;
  IF v_token = 0 THEN
    SET v_token = `{prefix}draw_token`(p_name);
    UPDATE `{prefix}locks` SET token = v_token WHERE name = p_name;
  END IF;
  RETURN CONCAT(v_count, ' ', v_token);
END;

