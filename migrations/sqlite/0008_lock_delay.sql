-- dblock schema version 8 for SQLite: lock-delay after a lost lease (migrations/postgres/0008
-- explains the design). expires_at stays the moment the name becomes free; a lock taken with a
-- delay writes its lease's end plus the delay there and the delay here, in milliseconds. SQLite's
-- statements live in the library (sqlite_sql.hpp).
ALTER TABLE "{prefix}locks" ADD COLUMN lock_delay_ms INTEGER NOT NULL DEFAULT 0;
