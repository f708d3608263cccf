-- dblock schema version 3: on MySQL/MariaDB it installs acquire_held, which this set installs in
-- version 1 already; the version exists so that every dialect has the same versions.
DO 1;
