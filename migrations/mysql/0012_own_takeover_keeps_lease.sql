-- dblock schema version 12 for MySQL/MariaDB (and Galera, which reads this same file): a takeover
-- of the caller's own live row keeps the later lease and the longer lock-delay, as a re-entry does.
-- The caller takes over its own live row when it names another token than the row's: a leftover it
-- no longer counts, or its own acquisition landing after its reply was lost, when a guard of the
-- owner may believe that row's lease by then. Before, the takeover wrote the new, perhaps shorter
-- lease, and the name could be granted to another owner while that guard still believed it held
-- (doc/semantics.md, "How the core is tested"). 0008's acquire_delayed re-defined with that one
-- change; 0011's acquire_many calls it, so combined acquisitions get it too. 0003's acquire_held,
-- for other languages, stays as it was: re-defining it here would be undone whenever a broken-off
-- 0003 is completed again (`migrate repair`), and verify would then refuse the database
-- (doc/sql-contract.md says what a caller of it must do instead). 0004's acquire_member gets the
-- same change for a membership (at the end).
--
-- Assignments run left to right and each reads the columns assigned before it: count, acquired_at
-- and token decide from the old row; token then marks a takeover, 0 of a free row (the new lease
-- and delay) and -1 of the caller's own live row (the later lease and the longer delay, like a
-- re-entry); the new token is drawn for both after the upsert. expires_at picks the caller's own
-- row (re-entered or taken over) by its live lease; lock_delay_ms, after it, by the same test,
-- which still holds for that row because the lease just written is no earlier.
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
    token         = IF(expires_at <= v_now, 0,
                       IF(owner = VALUES(owner) AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now
                          AND token <> p_held_token, -1, token)),
    expires_at    = IF(token = 0, VALUES(expires_at),
                       IF(owner = VALUES(owner) AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now,
                          GREATEST(expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND,
                                   v_now + INTERVAL p_ttl_us MICROSECOND)
                            + INTERVAL (GREATEST(lock_delay_ms, p_delay_ms) * 1000) MICROSECOND,
                          expires_at)),
    lock_delay_ms = IF(token = 0, VALUES(lock_delay_ms),
                       IF(owner = VALUES(owner) AND expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND > v_now,
                          GREATEST(lock_delay_ms, p_delay_ms), lock_delay_ms)),
    owner         = IF(token = 0, VALUES(owner), owner);
  SELECT owner, count, token, expires_at - INTERVAL (lock_delay_ms * 1000) MICROSECOND
  INTO v_owner, v_count, v_token, v_lease_end FROM `{prefix}locks` WHERE name = p_name;
  IF v_owner <> p_owner OR v_lease_end <= v_now THEN
    RETURN NULL;
  END IF;
  IF v_token <= 0 THEN
    SET v_token = `{prefix}draw_token`(p_name);
    UPDATE `{prefix}locks` SET token = v_token WHERE name = p_name;
  END IF;
  RETURN CONCAT(v_count, ' ', v_token);
END;

-- 0004's acquire_member with the same change for a membership (its body is the same in the galera
-- set): the caller's own membership row taken over afresh keeps the later lease. One whose lease
-- has ended has an expiry before this call's, so it takes the new one; members of an earlier group
-- are deleted before the first member of a new group is written. A reader's row taken afresh keeps
-- its token (the epoch) and adds a level to its count, which the levels still to be released need
-- (migrations/postgres/0012 says why); count is assigned first, so it reads the old token.
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
    FROM `{prefix}holders` WHERE name = p_name AND owner = p_owner AND kind = p_kind;
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
    SET v_token = IF(p_kind = 'permit', `{prefix}draw_token`(p_name), v_epoch);
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
