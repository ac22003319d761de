-- Long-term memory: recall strategies (memory configs), the memories drawn from conversations,
-- and how far each conversation has been extracted.

CREATE TABLE memory_configs (
    id                          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                        TEXT             NOT NULL,
    status                      SMALLINT         NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    vector_store_instance_id    BIGINT REFERENCES store_instances (id) ON DELETE SET NULL,
    -- Required on create; a deleted model leaves NULL and recall falls back to the default model.
    embedding_model_id          BIGINT REFERENCES model_configs (id) ON DELETE SET NULL,
    dimension                   INT CHECK (dimension BETWEEN 1 AND 16000),
    max_recall                  INT              NOT NULL DEFAULT 5 CHECK (max_recall BETWEEN 1 AND 100),
    rerank_model_id             BIGINT REFERENCES model_configs (id) ON DELETE SET NULL,
    enter_rerank_count          INT              NOT NULL DEFAULT 20 CHECK (enter_rerank_count BETWEEN 1 AND 200),
    extraction_interval         INT              NOT NULL DEFAULT 5 CHECK (extraction_interval BETWEEN 1 AND 1000),
    max_memories_per_extraction INT              NOT NULL DEFAULT 5 CHECK (max_memories_per_extraction BETWEEN 1 AND 50),
    extraction_model_id         BIGINT REFERENCES model_configs (id) ON DELETE SET NULL,
    memory_expiration_days      INT CHECK (memory_expiration_days BETWEEN 1 AND 36500),
    rrf_k                       INT              NOT NULL DEFAULT 60 CHECK (rrf_k BETWEEN 1 AND 1000),
    search_engine_enable        BOOLEAN          NOT NULL DEFAULT FALSE,
    search_engine_instance_id   BIGINT REFERENCES store_instances (id) ON DELETE SET NULL,
    rewrite_enabled             BOOLEAN          NOT NULL DEFAULT FALSE,
    rerank_enabled              BOOLEAN          NOT NULL DEFAULT FALSE,
    threshold_enabled           BOOLEAN          NOT NULL DEFAULT FALSE,
    similarity_threshold        DOUBLE PRECISION NOT NULL DEFAULT 0.5 CHECK (similarity_threshold BETWEEN 0 AND 1),
    dense_weight                DOUBLE PRECISION NOT NULL DEFAULT 0.7 CHECK (dense_weight BETWEEN 0 AND 1),
    fusion_strategy             TEXT             NOT NULL DEFAULT 'RRF' CHECK (fusion_strategy IN ('RRF', 'WEIGHTED_SUM')),
    custom_extraction_prompt    TEXT,
    creator_id                  BIGINT           NOT NULL REFERENCES users (id),
    create_dt                   TIMESTAMPTZ      NOT NULL DEFAULT now(),
    update_dt                   TIMESTAMPTZ      NOT NULL DEFAULT now()
);

-- A memory belongs to one agent and exactly one owner, like the conversation it came from.
CREATE TABLE memories (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id           BIGINT           NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    user_id            BIGINT REFERENCES users (id) ON DELETE CASCADE,
    external_user_id   BIGINT REFERENCES external_users (id) ON DELETE CASCADE,
    conversation_id    BIGINT REFERENCES conversations (id) ON DELETE SET NULL,
    -- The client's conversation id, kept when the conversation itself is deleted.
    conversation_key   TEXT             NOT NULL DEFAULT '',
    memory_type        TEXT             NOT NULL CHECK (memory_type IN ('FACT', 'DECISION', 'PREFERENCE', 'TASK_PROGRESS', 'REFERENCE')),
    category           TEXT             NOT NULL DEFAULT '',
    title              TEXT             NOT NULL,
    content            TEXT             NOT NULL,
    tags               TEXT[]           NOT NULL DEFAULT '{}',
    relevance_score    DOUBLE PRECISION NOT NULL DEFAULT 0,
    confidence_score   DOUBLE PRECISION NOT NULL DEFAULT 0,
    status             TEXT             NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'ARCHIVED', 'SUPPRESSED')),
    access_count       BIGINT           NOT NULL DEFAULT 0,
    accessed_at        TIMESTAMPTZ,
    -- Type + normalised title: a restatement with the same key updates instead of duplicating.
    normalized_key     TEXT             NOT NULL,
    -- Vectors of different models are not comparable (nor of equal length): recall only
    -- compares a query with memories embedded by the same model.
    embedding          vector,
    embedding_model_id BIGINT,
    tsv                tsvector,
    create_dt          TIMESTAMPTZ      NOT NULL DEFAULT now(),
    update_dt          TIMESTAMPTZ      NOT NULL DEFAULT now(),
    CHECK ((user_id IS NULL) <> (external_user_id IS NULL))
);
CREATE INDEX memories_user_idx ON memories (agent_id, user_id, status) WHERE user_id IS NOT NULL;
CREATE INDEX memories_external_idx ON memories (agent_id, external_user_id, status) WHERE external_user_id IS NOT NULL;
CREATE INDEX memories_conversation_idx ON memories (conversation_id);
CREATE INDEX memories_key_idx ON memories (agent_id, memory_type, normalized_key);
CREATE INDEX memories_tsv_idx ON memories USING gin (tsv);
CREATE INDEX memories_active_age_idx ON memories (agent_id, update_dt) WHERE status = 'ACTIVE';

-- Extraction progress of one conversation. `last_message_id` makes redelivery harmless;
-- `queued_message_id` stops every later round from queueing the same work again; the lease
-- keeps two workers off the same conversation.
CREATE TABLE memory_extractions (
    conversation_id   BIGINT      PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
    last_message_id   BIGINT      NOT NULL DEFAULT 0,
    queued_message_id BIGINT      NOT NULL DEFAULT 0,
    lease_until       TIMESTAMPTZ,
    update_dt         TIMESTAMPTZ NOT NULL DEFAULT now()
);
