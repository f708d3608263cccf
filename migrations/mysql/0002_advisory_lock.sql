-- dblock schema version 2: PostgreSQL installs its advisory-lock wait function here. GET_LOCK mode
-- waits with GET_LOCK's own timeout and draws tokens from the sequence of version 1, so MySQL needs
-- nothing new; the version exists so that every dialect has the same versions.
DO 1;
