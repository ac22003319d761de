-- Memories have always lived in the service's own database: a memory config naming another
-- store instance had it checked and kept, never used. Naming one is now refused; configs that
-- name one are pointed at the built-in instance of its category, where their memories are.
UPDATE memory_configs m
SET vector_store_instance_id = b.id
FROM store_instances s, store_instances b
WHERE s.id = m.vector_store_instance_id AND NOT s.builtin
  AND b.builtin AND b.category = 1;

UPDATE memory_configs m
SET search_engine_instance_id = b.id
FROM store_instances s, store_instances b
WHERE s.id = m.search_engine_instance_id AND NOT s.builtin
  AND b.builtin AND b.category = 2;
