-- dblock schema version 11: combined acquisitions and releases (doc/performance.md, "Combining").
-- Nothing changes in this dialect's schema: PostgreSQL's combined statements are inline SQL
-- (src/backends/postgres/pg_sql.hpp, acquire_many and release_last_many); the version exists so
-- that every dialect's schema has one number.
SELECT 1;
