-- dblock schema version 17 for SQLite: waiters are rows, served first come, first served
-- (doc/fair-queue.md; migrations/postgres/0017_fair_queue.sql has the whole design). Used only by
-- managers that opt in (ManagerOptions::fair_queue). SQLite has one writer: the statements of a
-- waiter's turn and of a release that hands the name on run in one write transaction, and seq, one
-- more than the name's largest, follows arrival per name. Times are integer milliseconds since the
-- epoch, as in the lock table.
CREATE TABLE "{prefix}waiters" (
  name       TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 255),
  seq        INTEGER NOT NULL,
  owner      TEXT NOT NULL,
  kind       TEXT NOT NULL CHECK (kind IN ('exclusive', 'shared', 'permit')),
  ttl_ms     INTEGER NOT NULL CHECK (ttl_ms > 0),
  queued_at  INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (name, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX "{prefix}waiters_owner" ON "{prefix}waiters" (name, owner, kind);
CREATE INDEX "{prefix}waiters_expires_at" ON "{prefix}waiters" (expires_at);
