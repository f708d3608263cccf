-- dblock schema version 3. On PostgreSQL and MySQL this version fixes the acquire function (one
-- clock reading, re-entry never shortens a lease, no reliance on affected-row counts) and adds a
-- renewal that reports positions; SQLite's statements live in the library, and the version
-- exists so that every dialect has the same versions.
SELECT 1;
