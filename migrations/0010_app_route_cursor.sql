-- The ROUND_ROBIN cursor of each app: bumped once per routed model call, so every instance
-- of the service takes the next node in turn.
ALTER TABLE apps ADD COLUMN route_cursor BIGINT NOT NULL DEFAULT 0;
