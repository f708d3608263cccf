-- dblock schema version 6: MySQL's GET_LOCK mode draws its tokens through a write, which makes
-- them durable (migrations/mysql/0006). PostgreSQL's nextval already is: a fetch that writes WAL
-- gives its transaction an xid, so the commit flushes it (doc/database-facts.md). Nothing changes
-- here; the version exists so that every dialect has the same versions.
SELECT 1;
