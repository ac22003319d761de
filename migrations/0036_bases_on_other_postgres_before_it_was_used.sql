-- A base on a PGVECTOR or PG_FULLTEXT instance other than the built-in ones kept its entries in
-- the service's own `chunks` until now: the instance was never connected to. Such a base now
-- reads and writes the instance's database, where nothing of it is yet, and its search would
-- find nothing. Those with entries in `chunks` (an embedding for the vector side, a tsvector
-- for full text), or with a document still being processed (by a worker of the code before,
-- which writes there too), are pointed at the built-in instance of that category; any other
-- keeps its instance and fills it from its first write.
UPDATE knowledge_bases k
SET vector_store_instance_id = b.id
FROM store_instances s, store_instances b
WHERE s.id = k.vector_store_instance_id AND s.store_type = 1 AND NOT s.builtin
  AND b.builtin AND b.category = 1
  AND (EXISTS (SELECT 1 FROM chunks c WHERE c.rag_id = k.id AND c.embedding IS NOT NULL)
       OR EXISTS (SELECT 1 FROM documents d WHERE d.rag_id = k.id
                  AND d.status IN ('pending', 'parsing', 'chunking', 'embedding')));

UPDATE knowledge_bases k
SET search_engine_instance_id = b.id
FROM store_instances s, store_instances b
WHERE s.id = k.search_engine_instance_id AND s.store_type = 4 AND NOT s.builtin
  AND b.builtin AND b.category = 2
  AND (EXISTS (SELECT 1 FROM chunks c WHERE c.rag_id = k.id AND c.tsv IS NOT NULL)
       OR EXISTS (SELECT 1 FROM documents d WHERE d.rag_id = k.id
                  AND d.status IN ('pending', 'parsing', 'chunking', 'embedding')));
