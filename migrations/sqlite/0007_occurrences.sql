-- dblock schema version 7 for SQLite: occurrences of scheduled jobs, remembered past their runs
-- (see migrations/postgres/0007_occurrences.sql). Times are integer milliseconds since the epoch.
CREATE TABLE "{prefix}occurrences" (
  name        TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 255),
  occurrence  TEXT NOT NULL CHECK (length(CAST(occurrence AS BLOB)) BETWEEN 1 AND 255),
  owner       TEXT NOT NULL,
  token       INTEGER NOT NULL,
  status      TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
  attempts    INTEGER NOT NULL,
  exit_code   INTEGER,
  claimed_at  INTEGER NOT NULL,
  finished_at INTEGER,
  keep_until  INTEGER NOT NULL,
  PRIMARY KEY (name, occurrence)
) WITHOUT ROWID;
CREATE INDEX "{prefix}occurrences_keep_until" ON "{prefix}occurrences" (keep_until);
