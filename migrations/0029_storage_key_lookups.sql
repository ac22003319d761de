-- The housekeeping deletes a noted file only when no row names its key, and asks each table
-- that keeps keys. resources and skills have unique keys (indexed); documents and
-- document_images had no index on theirs, so every noted file cost a full read of both tables,
-- and a backlog of notes on a large installation outlasted the housekeeping's time limit,
-- taking the jobs after it along. Built in the migration's transaction: writes to the two
-- tables wait for the build, once.
CREATE INDEX IF NOT EXISTS documents_storage_key_idx ON documents (storage_key);
CREATE INDEX IF NOT EXISTS document_images_storage_key_idx ON document_images (storage_key);
