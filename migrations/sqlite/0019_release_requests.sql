-- dblock schema version 19 for SQLite: a holder can be asked to let go, and can carry a note
-- (migrations/postgres/0019 has the design). The asked grant's token goes into release_asked_token;
-- the renewal's RETURNING says per renewed row whether its grant was asked. The hand-over to a
-- named successor needs no object here: the library's statements order the waiters.
ALTER TABLE "{prefix}locks" ADD COLUMN release_asked_token INTEGER;
-- A holder's note, for its grant's token (migrations/postgres/0019 says why).
ALTER TABLE "{prefix}locks" ADD COLUMN holder_note TEXT;
ALTER TABLE "{prefix}locks" ADD COLUMN note_token INTEGER;
