-- dblock schema version 2. On PostgreSQL this version adds the advisory-lock function; SQLite
-- has no advisory locks, and the version exists so that every dialect has the same versions.
SELECT 1;
