-- dblock schema version 19 for MySQL/MariaDB and Galera (one file): a holder can be asked to let go
-- (migrations/postgres/0019_release_requests.sql has the design). The asked grant's token goes into
-- release_asked_token; the library's renewal leaves an asked row to a second statement that renews it
-- and reads which were asked (UPDATE has no RETURNING here), so a renewal with nothing asked stays one
-- statement. A nullable column added last: InnoDB adds it in place, without copying the table.
ALTER TABLE `{prefix}locks` ADD COLUMN IF NOT EXISTS release_asked_token BIGINT NULL;
