-- dblock schema version 1 for SQLite: the lock table and the fencing-token counter.
-- The migrator fills the table prefix placeholder (validated as [a-z_][a-z0-9_]*). SQLite has one
-- schema per file ("main").
-- Times are integer milliseconds since the epoch, read from SQLite's clock ('now' is fixed within
-- one statement). SQLite serialises every write, so a token drawn inside the upsert cannot be
-- overtaken by a later grant; the counter survives row deletion, so tokens only ever rise.

CREATE TABLE "{prefix}locks" (
  name        TEXT NOT NULL PRIMARY KEY CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 255),
  owner       TEXT NOT NULL,
  count       INTEGER NOT NULL CHECK (count > 0),
  token       INTEGER NOT NULL,
  acquired_at INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX "{prefix}locks_expires_at" ON "{prefix}locks" (expires_at);

CREATE TABLE "{prefix}token_counter" (
  id    INTEGER PRIMARY KEY CHECK (id = 1),
  value INTEGER NOT NULL
);
INSERT INTO "{prefix}token_counter" (id, value) VALUES (1, 0);

CREATE TRIGGER "{prefix}locks_token_insert" AFTER INSERT ON "{prefix}locks" BEGIN
  UPDATE "{prefix}token_counter" SET value = NEW.token WHERE NEW.token > value;
END;
CREATE TRIGGER "{prefix}locks_token_update" AFTER UPDATE OF token ON "{prefix}locks" BEGIN
  UPDATE "{prefix}token_counter" SET value = NEW.token WHERE NEW.token > value;
END;
