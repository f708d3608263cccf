-- dblock schema version 6: GET_LOCK mode's tokens survive a crash of the server.
--
-- A bare `SELECT NEXTVAL(seq)` that refills the sequence's cache writes the new cache end outside
-- any transaction, and nothing makes that write durable: killed right after (SIGKILL), the server
-- came back with the old cache end and handed out the same tokens again (1, 1, 1, 1 over four
-- crashes). A NEXTVAL inside a statement that writes a row is made durable by that statement's
-- commit (1, 1001, 2001). GET_LOCK mode draws its token by writing it here: one row per slot
-- (CONNECTION_ID() % 64), replaced on each draw, so concurrent draws seldom meet on a row.
CREATE TABLE IF NOT EXISTS `{prefix}token_draws` (
  slot  SMALLINT NOT NULL,
  token BIGINT NOT NULL,
  PRIMARY KEY (slot)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
