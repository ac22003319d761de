-- A stop asked for an answer still being generated (POST .../stop): the turn, on whichever
-- instance runs it, reads it once a second and ends the answer as stopped.
ALTER TABLE messages ADD COLUMN stop_asked BOOLEAN NOT NULL DEFAULT FALSE;
