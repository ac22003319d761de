-- A base's chunk list pages by document and position: with only (rag_id) every page read and
-- sorted all of the base's chunks. The new index serves the same rag_id lookups and the order,
-- so it replaces the old one rather than adding a third index to every chunk write.
CREATE INDEX IF NOT EXISTS chunks_rag_order_idx ON chunks (rag_id, document_id, chunk_index);
DROP INDEX IF EXISTS chunks_rag_idx;

-- Memories listed by the client's conversation id (GET /memory/conversation/{id}) or across a
-- user's agents (a search without agentId) had no index to start from: every call read every
-- tenant's memories. Built in the migration's transaction, like 0029.
CREATE INDEX IF NOT EXISTS memories_conversation_key_idx ON memories (conversation_key);
CREATE INDEX IF NOT EXISTS memories_user_created_idx ON memories (user_id, create_dt DESC) WHERE user_id IS NOT NULL;
