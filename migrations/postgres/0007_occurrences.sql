-- dblock schema version 7: occurrences of scheduled jobs, remembered past their runs.
--
-- A job that runs "once per occurrence" across a fleet (`dblock run --once-per 1h`) claims the
-- row (name, occurrence) while it holds the lock `name`, and records how the run ended. The
-- primary key makes the claim atomic across hosts: the first INSERT wins, every later one finds
-- the row. A row 'running' whose lock grant (token) no longer holds a live lease was abandoned:
-- its holder died mid-run. keep_until: when the reaper may delete the row (a few periods on).
CREATE TABLE "{schema}"."{prefix}occurrences" (
  name        text COLLATE "C" NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 255),
  occurrence  text COLLATE "C" NOT NULL CHECK (octet_length(occurrence) BETWEEN 1 AND 255),
  owner       text NOT NULL,
  token       bigint NOT NULL,
  status      text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
  attempts    integer NOT NULL,
  exit_code   integer,
  claimed_at  timestamptz NOT NULL,
  finished_at timestamptz,
  keep_until  timestamptz NOT NULL,
  PRIMARY KEY (name, occurrence)
);
CREATE INDEX "{prefix}occurrences_keep_until" ON "{schema}"."{prefix}occurrences" (keep_until);
