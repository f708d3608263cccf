-- dblock schema version 2: PostgreSQL installs its advisory-lock wait function here. GET_LOCK is
-- node-local on Galera, so GET_LOCK mode is refused there and needs nothing; the version exists
-- so that every dialect has the same versions.
DO 1;
