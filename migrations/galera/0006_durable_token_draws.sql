-- dblock schema version 6: MySQL's GET_LOCK mode draws its tokens through a write, which makes
-- them durable (migrations/mysql/0006). GET_LOCK mode is refused on Galera and its tokens come from
-- the counter rows of version 1, written in transactions: nothing changes here; the version exists
-- so that every dialect has the same versions.
DO 1;
