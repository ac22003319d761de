-- A commit re-checks its files with the dedup rules its preview was made with (a preview may
-- override the base's rules), not with the base's stored ones. Previews made before this
-- migration have none stored and keep the base's rules.
ALTER TABLE upload_previews ADD COLUMN dedup_strategy SMALLINT, ADD COLUMN dedup_action SMALLINT;
