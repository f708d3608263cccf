-- dblock schema version 17 for MySQL/MariaDB and Galera: waiters are rows, served first come, first
-- served (doc/fair-queue.md; migrations/postgres/0017_fair_queue.sql has the whole design). Used only
-- by managers that opt in (ManagerOptions::fair_queue); this dialect's statements are not built yet,
-- so the tables stay empty here. Arrival order will come from a per-name counter row (waiter_counters),
-- which a cluster certifies, not from AUTO_INCREMENT (interleaved per node on Galera).
CREATE TABLE IF NOT EXISTS `{prefix}waiters` (
  name       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  seq        BIGINT NOT NULL,
  owner      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  kind       VARCHAR(16) CHARACTER SET ascii NOT NULL,
  ttl_ms     BIGINT NOT NULL,
  queued_at  DATETIME(6) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (name, seq),
  UNIQUE `{prefix}waiters_owner` (name, owner, kind),
  KEY `{prefix}waiters_expires_at` (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS `{prefix}waiter_counters` (
  name     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  last_seq BIGINT NOT NULL,
  PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
