-- dblock schema version 16 for MySQL/MariaDB and Galera (one file): nothing waits for a row an
-- application's fenced transaction holds but that row's own next owner.
--
-- A fence share-locks the lock row (Galera's writes it) until its transaction ends. acquire_delayed
-- (0012) upserted first and judged after, so an acquisition of a name another owner held live waited
-- for that lock inside its statement, for the whole fenced transaction: a try did not answer busy, and
-- every combined request of the manager (acquire_many calls it for each name) waited with it. It now
-- refuses such a name first, by a plain read that locks nothing (its snapshot can only be older than
-- the truth: a caller may be refused a moment early, never granted wrongly; the upsert after it
-- re-reads the newest row). renew_members (0014) locked each group's row FOR UPDATE behind a member's
-- fence; it now skips a group's row that another transaction holds and returns the positions of that
-- group's memberships as -(position + 1), left alone: neither renewed nor lost (the library asks
-- again soon; nobody can take the row while the fence holds it). The reads that must not wait are
-- functions of their own: in a function that writes a table, MariaDB 10.11 makes every read of that
-- table a locking read (it waited for a fence's share lock), while a read in a function called from
-- it locks nothing. Those two functions are new; the others are re-defined (same signatures). The
-- library's user needs no new grant: a function runs with its definer's rights. (No comment inside
-- a function's body: the mariadb client drops it.)
CREATE OR REPLACE FUNCTION `{prefix}held_by_another`(
  p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
  p_now DATETIME(6))
RETURNS BOOLEAN NOT DETERMINISTIC READS SQL DATA
BEGIN
  RETURN EXISTS (SELECT 1 FROM `{prefix}locks` WHERE name = p_name AND owner <> p_owner AND expires_at > p_now);
END;

CREATE OR REPLACE FUNCTION `{prefix}lock_row_exists`(p_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin)
RETURNS BOOLEAN NOT DETERMINISTIC READS SQL DATA
BEGIN
  RETURN EXISTS (SELECT 1 FROM `{prefix}locks` WHERE name = p_name);
END;

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
  IF `{prefix}held_by_another`(p_name, p_owner, v_now) THEN
    RETURN NULL;
  END IF;
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

CREATE OR REPLACE FUNCTION `{prefix}renew_members`(p_held LONGTEXT)
RETURNS LONGTEXT CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6);
  DECLARE v_done BOOLEAN DEFAULT FALSE;
  DECLARE v_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_kind VARCHAR(8) CHARACTER SET ascii;
  DECLARE v_token BIGINT;
  DECLARE v_ttl_us BIGINT;
  DECLARE v_position BIGINT;
  DECLARE v_epoch BIGINT;
  DECLARE v_group_expires DATETIME(6);
  DECLARE v_found BIGINT;
  DECLARE v_locked BIGINT;
  DECLARE v_expires DATETIME(6);
  DECLARE v_renewed LONGTEXT CHARACTER SET ascii DEFAULT '';
  DECLARE held CURSOR FOR
    SELECT h.name, h.owner, h.kind, h.token, h.ttl_us, h.position FROM JSON_TABLE(p_held, '$[*]' COLUMNS (
      name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]',
      owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[1]',
      kind VARCHAR(8) CHARACTER SET ascii PATH '$[2]',
      token BIGINT PATH '$[3]',
      ttl_us BIGINT PATH '$[4]',
      position FOR ORDINALITY)) h
    ORDER BY h.name;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;
  OPEN held;
  renewing: LOOP
    FETCH held INTO v_name, v_owner, v_kind, v_token, v_ttl_us, v_position;
    IF v_done THEN
      LEAVE renewing;
    END IF;
    SELECT COUNT(*), MAX(IF(owner = IF(v_kind = 'permit', '(permits)', '(readers)'), token, NULL)), MAX(expires_at)
      INTO v_locked, v_epoch, v_group_expires
    FROM `{prefix}locks` WHERE name = v_name FOR UPDATE SKIP LOCKED;
    IF v_locked = 0 AND `{prefix}lock_row_exists`(v_name) THEN
      SET v_renewed = CONCAT(v_renewed, IF(v_renewed = '', '', ','), -v_position);
      ITERATE renewing;
    END IF;
    SET v_now = UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND;
    IF v_group_expires IS NULL OR v_group_expires <= v_now THEN
      SET v_epoch = NULL;
    END IF;
    SELECT COUNT(*) INTO v_found FROM `{prefix}holders`
    WHERE name = v_name AND owner = v_owner AND kind = v_kind AND token = v_token AND epoch = v_epoch
      AND expires_at > v_now
    FOR UPDATE;
    IF v_found > 0 THEN
      SET v_expires = v_now + INTERVAL v_ttl_us MICROSECOND;
      UPDATE `{prefix}holders` SET expires_at = GREATEST(expires_at, v_expires)
      WHERE name = v_name AND owner = v_owner AND kind = v_kind AND token = v_token AND epoch = v_epoch;
      UPDATE `{prefix}locks` SET expires_at = GREATEST(expires_at, v_expires) WHERE name = v_name;
      SET v_renewed = CONCAT(v_renewed, IF(v_renewed = '', '', ','), v_position - 1);
    END IF;
  END LOOP;
  CLOSE held;
  RETURN v_renewed;
END;
