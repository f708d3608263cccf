-- dblock schema version 18: the fair queue's statements for MySQL/MariaDB and Galera
-- (migrations/mysql/0018). Nothing else changes in this dialect: its statements came with 0017. The
-- version exists so that every dialect's schema has one number; its one statement says what the
-- waiters table is to whoever finds it in the catalog (a migration's text may not be empty: the
-- simple query protocol answers an empty query with no command).
COMMENT ON TABLE "{schema}"."{prefix}waiters" IS 'dblock fair queue: one row per waiting acquisition (doc/fair-queue.md)';
