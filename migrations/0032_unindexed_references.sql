-- document_images.chunk_id and .resource_id reference chunks and resources ON DELETE SET NULL
-- and had no index: every deleted chunk (a reprocessed document deletes all of its own) and every
-- deleted resource read the whole image table to find rows to clear. Neither column is written
-- today, so the partial indexes are empty; they keep the clearing cheap if one ever is. Built in
-- the migration's transaction, like 0029.
CREATE INDEX IF NOT EXISTS document_images_chunk_idx ON document_images (chunk_id) WHERE chunk_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS document_images_resource_idx ON document_images (resource_id) WHERE resource_id IS NOT NULL;
