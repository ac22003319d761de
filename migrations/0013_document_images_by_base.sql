-- Search asks whether a base has any saved image before reading image evidence; without this
-- index that question scanned every image of every base.
CREATE INDEX document_images_rag_idx ON document_images (rag_id);
