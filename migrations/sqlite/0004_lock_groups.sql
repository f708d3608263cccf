-- dblock schema version 4 for SQLite: groups of holders of one name — the permits of a counting
-- semaphore and the readers of a read-write lock — and writers marked as waiting.
-- A group holds its name through the name's lock row (owner '(permits)' or '(readers)', token
-- the group's epoch, lease the latest of its members'), so plain locks and groups exclude each
-- other and the reaper deletes a lapsed group like any row. Members are rows of this table, each
-- with its own lease and token; the library changes them inside IMMEDIATE transactions.
CREATE TABLE "{prefix}holders" (
  name        TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 255),
  owner       TEXT NOT NULL,
  kind        TEXT NOT NULL CHECK (kind IN ('permit', 'shared', 'writer')),
  count       INTEGER NOT NULL CHECK (count >= 0),
  token       INTEGER NOT NULL,
  epoch       INTEGER NOT NULL,
  acquired_at INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL,
  PRIMARY KEY (name, owner, kind)
);
CREATE INDEX "{prefix}holders_expires_at" ON "{prefix}holders" (expires_at);
