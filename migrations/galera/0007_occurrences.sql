-- dblock schema version 7 for MariaDB Galera clusters: occurrences of scheduled jobs, remembered
-- past their runs (see migrations/postgres/0007_occurrences.sql). The primary key makes a claim
-- atomic across nodes: two nodes claiming one occurrence at once conflict at certification, and
-- the one retried then finds the row.
CREATE TABLE IF NOT EXISTS `{prefix}occurrences` (
  name        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  occurrence  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  owner       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  token       BIGINT NOT NULL,
  status      VARCHAR(16) CHARACTER SET ascii NOT NULL,
  attempts    INT NOT NULL,
  exit_code   INT NULL,
  claimed_at  DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  keep_until  DATETIME(6) NOT NULL,
  PRIMARY KEY (name, occurrence),
  KEY `{prefix}occurrences_keep_until` (keep_until)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
