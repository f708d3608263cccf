-- dblock schema version 9 for SQLite: the fence, as one statement inside the application's own
-- `BEGIN IMMEDIATE` transaction (see doc/sql-contract.md):
--   INSERT INTO "<prefix>fence" (name, token) VALUES (?, ?);
-- The view stores nothing: its trigger aborts the statement, with the message below and
-- SQLITE_CONSTRAINT (extended code SQLITE_CONSTRAINT_TRIGGER), unless `token` is the live holder of
-- `name` by SQLite's clock (not a revoked, min-hold or group row). BEGIN IMMEDIATE already holds
-- the database's write lock, so no takeover, reap, revocation or release can commit before the
-- transaction ends. SQLite has no server to end a paused transaction: its write lock lasts until
-- the holding process commits, rolls back or dies.
CREATE VIEW "{prefix}fence" (name, token) AS SELECT NULL, NULL WHERE 0;
CREATE TRIGGER "{prefix}fence_check" INSTEAD OF INSERT ON "{prefix}fence" BEGIN
  SELECT RAISE(ABORT, 'dblock fence: the token is not the live holder of the lock')
  WHERE NOT EXISTS (SELECT 1 FROM "{prefix}locks" l
                    WHERE l.name = NEW.name AND l.token = NEW.token
                      AND l.expires_at - l.lock_delay_ms > (CAST(strftime('%s','now') AS INTEGER) * 1000 + CAST(substr(strftime('%f','now'), 4) AS INTEGER))
                      AND l.owner NOT LIKE '(revoked)%' AND l.owner NOT LIKE '(min-hold)%'
                      AND l.owner NOT IN ('(permits)', '(readers)'));
END;
