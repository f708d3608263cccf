-- dblock schema version 11 for MySQL/MariaDB (and Galera, which reads this same file): many
-- acquisitions, or many last-level releases, in one call (doc/performance.md, "Combining"). One
-- function call is one statement: one round trip, one transaction, one commit for the batch, rolled
-- back whole on any error (a deadlock, a lock-wait timeout, a brute-force abort on Galera).
-- The caller sends names distinct and in byte order, the one lock order of every statement that
-- locks several rows; the loop refuses anything else, so two batches never wait for each other in
-- a cycle. Each name is acquired by 0008's acquire_delayed, unchanged: the rules, the token drawn
-- under the row lock (draw_token of each dialect), the clock of the statement. A stored function's
-- UTC_TIMESTAMP(6) is the top-level statement's start, so every name of a batch reads the same
-- time (doc/database-facts.md).
-- The loop runs by index over the JSON array, with no cursor and no handler: any error of a
-- called function ends the whole call, and the call's transaction rolls back.

-- p_requests: [[name, owner, ttl_us, held_token, delay_ms], ...]. Returns the grants as
-- "position count token" (0-based positions, comma-separated; '' when none was granted).
CREATE OR REPLACE FUNCTION `{prefix}acquire_many`(p_requests LONGTEXT)
RETURNS LONGTEXT CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_n INT DEFAULT JSON_LENGTH(p_requests);
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_last VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_grant VARCHAR(64) CHARACTER SET ascii;
  DECLARE v_out LONGTEXT CHARACTER SET ascii DEFAULT '';
  WHILE v_i < v_n DO
    SET v_name = JSON_VALUE(p_requests, CONCAT('$[', v_i, '][0]'));
    IF v_name IS NULL OR (v_i > 0 AND v_name <= v_last) THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'acquire_many: names must be distinct and in ascending order';
    END IF;
    SET v_last = v_name;
    SET v_grant = `{prefix}acquire_delayed`(v_name,
                    JSON_VALUE(p_requests, CONCAT('$[', v_i, '][1]')),
                    CAST(JSON_VALUE(p_requests, CONCAT('$[', v_i, '][2]')) AS SIGNED),
                    CAST(JSON_VALUE(p_requests, CONCAT('$[', v_i, '][3]')) AS SIGNED),
                    CAST(JSON_VALUE(p_requests, CONCAT('$[', v_i, '][4]')) AS SIGNED));
    IF v_grant IS NOT NULL THEN
      SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), v_i, ' ', v_grant);
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  RETURN v_out;
END;

-- p_releases: [[name, owner, token], ...]. Deletes each row that carries that owner and token,
-- whatever its count (the caller's last level), and returns the 0-based positions of those
-- deleted, comma-separated ('' when none was). The owner goes through a variable of the column's
-- binary collation, so the comparison stays byte for byte.
CREATE OR REPLACE FUNCTION `{prefix}release_last_many`(p_releases LONGTEXT)
RETURNS LONGTEXT CHARACTER SET ascii NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
  DECLARE v_n INT DEFAULT JSON_LENGTH(p_releases);
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_last VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
  DECLARE v_out LONGTEXT CHARACTER SET ascii DEFAULT '';
  WHILE v_i < v_n DO
    SET v_name = JSON_VALUE(p_releases, CONCAT('$[', v_i, '][0]'));
    IF v_name IS NULL OR (v_i > 0 AND v_name <= v_last) THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'release_last_many: names must be distinct and in ascending order';
    END IF;
    SET v_last = v_name;
    SET v_owner = JSON_VALUE(p_releases, CONCAT('$[', v_i, '][1]'));
    DELETE FROM `{prefix}locks` WHERE name = v_name AND owner = v_owner
      AND token = CAST(JSON_VALUE(p_releases, CONCAT('$[', v_i, '][2]')) AS SIGNED);
    IF ROW_COUNT() > 0 THEN
      SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), v_i);
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  RETURN v_out;
END;
