-- dblock schema version 10 for SQLite: the fence of a group's member — a permit of a semaphore or a
-- reader of a read-write lock — as one statement inside the application's own `BEGIN IMMEDIATE`
-- transaction (doc/sql-contract.md):
--   INSERT INTO "<prefix>fence_member" (name, owner, kind, token) VALUES (?, ?, ?, ?);
-- kind 'permit' or 'shared'. The view stores nothing: its trigger aborts the statement, with the
-- message below and SQLITE_CONSTRAINT (SQLITE_CONSTRAINT_TRIGGER), unless that membership (the
-- holders row of name, owner and kind, with that token) is live by SQLite's clock and belongs to
-- the group that holds the name now. BEGIN IMMEDIATE holds the database's write lock, so nothing
-- that changes the name or its group commits before the transaction ends (and fenced transactions
-- run one at a time, readers' included). "<prefix>fence" (0009) is unchanged.
CREATE VIEW "{prefix}fence_member" (name, owner, kind, token) AS SELECT NULL, NULL, NULL, NULL WHERE 0;
CREATE TRIGGER "{prefix}fence_member_check" INSTEAD OF INSERT ON "{prefix}fence_member" BEGIN
  SELECT RAISE(ABORT, 'dblock fence: the token is not a live member of the lock')
  WHERE NOT EXISTS (SELECT 1 FROM "{prefix}locks" l JOIN "{prefix}holders" m ON m.name = l.name AND m.epoch = l.token
                    WHERE l.name = NEW.name AND l.owner = CASE NEW.kind WHEN 'permit' THEN '(permits)'
                                                                       WHEN 'shared' THEN '(readers)' END
                      AND m.owner = NEW.owner AND m.kind = NEW.kind AND m.token = NEW.token AND m.count > 0
                      AND l.expires_at > (CAST(strftime('%s','now') AS INTEGER) * 1000 + CAST(substr(strftime('%f','now'), 4) AS INTEGER))
                      AND m.expires_at > (CAST(strftime('%s','now') AS INTEGER) * 1000 + CAST(substr(strftime('%f','now'), 4) AS INTEGER)));
END;
