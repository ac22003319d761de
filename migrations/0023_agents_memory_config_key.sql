-- An agent's memory config was checked when bound and counted before a config was deleted, but
-- nothing held the two together: a deletion between another request's check and its update
-- left the agent bound to a config that no longer exists, and every one of its chats warned.
-- Bindings to configs already gone are cleared first.
UPDATE agents SET memory_config_id = NULL
WHERE memory_config_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM memory_configs m WHERE m.id = agents.memory_config_id);
ALTER TABLE agents DROP CONSTRAINT IF EXISTS agents_memory_config_id_fkey;
ALTER TABLE agents ADD CONSTRAINT agents_memory_config_id_fkey
    FOREIGN KEY (memory_config_id) REFERENCES memory_configs (id) ON DELETE RESTRICT;
