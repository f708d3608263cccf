-- dblock schema version 16: nothing waits for a row an application's fenced transaction holds but
-- that row's own next owner (migrations/mysql/0016). Nothing changes in this dialect's schema: the
-- library's own acquisition and renewal statements (src/backends/postgres/pg_sql.hpp) refuse a live
-- row of another owner without locking it and skip a row another transaction holds; the functions
-- for other languages (acquire_held, renew_held, renew_members) keep waiting, as callers of them
-- expect. The version exists so that every dialect's schema has one number.
SELECT 1;
