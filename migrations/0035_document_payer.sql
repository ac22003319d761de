-- Who pays for a document's current run: its uploader (NULL), or whoever asked for it to run
-- again. Billed to the uploader always, a base's owner could reprocess, as often as they
-- liked, a document an administrator had uploaded into their base, every run's embeddings,
-- smart chunking and image reading charged to the administrator's unlimited quota; and an
-- administrator reprocessing spent the uploader's.
ALTER TABLE documents ADD COLUMN IF NOT EXISTS payer_id BIGINT REFERENCES users (id) ON DELETE SET NULL;
