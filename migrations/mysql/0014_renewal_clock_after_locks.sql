-- dblock schema version 14 for MySQL/MariaDB and Galera (one file): a renewal of group members reads
-- the clock once it holds each group's row, not before it waits for it (see
-- migrations/postgres/0014_renewal_clock_after_locks.sql).
--
-- UTC_TIMESTAMP(6) inside a function is the calling statement's start (doc/database-facts.md, 9),
-- taken before any row-lock wait; renew_members (0004) judged every member by that reading. A
-- member whose lease ended while the function waited for its group's row, and whose place the
-- holder of that row gave to another, was renewed: one member more than the group's capacity.
-- SYSDATE(6) is read when it is evaluated: the reading taken right after each group's row is
-- locked, converted from the session's time zone (dblock's sessions use '+00:00'). Every row is
-- read with a locking read, so the newest committed version is judged, and the member's row is
-- updated under the conditions it was found by. The group's row is read with aggregates: a name
-- without a row gives NULLs, not the NOT FOUND that would end the loop. (No comment inside a
-- function's body: the mariadb client drops it, and a script applied by hand would differ.)
-- Function re-defined only: no new grant.
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
    SELECT MAX(IF(owner = IF(v_kind = 'permit', '(permits)', '(readers)'), token, NULL)), MAX(expires_at)
      INTO v_epoch, v_group_expires
    FROM `{prefix}locks` WHERE name = v_name FOR UPDATE;
    SET v_now = CONVERT_TZ(SYSDATE(6), @@session.time_zone, '+00:00');
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
