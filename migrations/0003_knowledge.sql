-- Knowledge bases: store instances, bases, documents, chunks with their vectors and text
-- index, document images, and upload previews.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE store_instances (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         TEXT        NOT NULL,
    category     SMALLINT    NOT NULL CHECK (category IN (1, 2)),
    store_type   SMALLINT    NOT NULL CHECK (store_type BETWEEN 1 AND 4),
    config       JSONB       NOT NULL DEFAULT '{}'::jsonb,
    password_enc TEXT,
    status       SMALLINT    NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    is_default   BOOLEAN     NOT NULL DEFAULT FALSE,
    -- The service's own Postgres: always there, never deleted.
    builtin      BOOLEAN     NOT NULL DEFAULT FALSE,
    create_dt    TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX store_instances_one_default ON store_instances (category) WHERE is_default;

INSERT INTO store_instances (name, category, store_type, status, is_default, builtin) VALUES
    ('Service PostgreSQL (pgvector)', 1, 1, 1, TRUE, TRUE),
    ('Service PostgreSQL (full text)', 2, 4, 1, TRUE, TRUE);

CREATE TABLE knowledge_bases (
    id                        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                      TEXT        NOT NULL,
    description               TEXT,
    icon                      TEXT,
    embedding_model_id        BIGINT      NOT NULL REFERENCES model_configs (id),
    dimension                 INT         NOT NULL CHECK (dimension BETWEEN 1 AND 16000),
    vector_store_instance_id  BIGINT      NOT NULL REFERENCES store_instances (id),
    rerank_model_id           BIGINT REFERENCES model_configs (id) ON DELETE SET NULL,
    search_engine_enable      BOOLEAN     NOT NULL DEFAULT TRUE,
    search_engine_instance_id BIGINT REFERENCES store_instances (id),
    status                    TEXT        NOT NULL DEFAULT 'active',
    chunk_params              JSONB       NOT NULL DEFAULT '{}'::jsonb,
    parse_params              JSONB       NOT NULL DEFAULT '{}'::jsonb,
    search_params             JSONB       NOT NULL DEFAULT '{}'::jsonb,
    model_params              JSONB       NOT NULL DEFAULT '{}'::jsonb,
    dedup_strategy            SMALLINT    NOT NULL DEFAULT 2 CHECK (dedup_strategy BETWEEN 0 AND 3),
    dedup_action              SMALLINT    NOT NULL DEFAULT 0 CHECK (dedup_action BETWEEN 0 AND 2),
    upload_confirm            BOOLEAN     NOT NULL DEFAULT FALSE,
    creator_id                BIGINT      NOT NULL REFERENCES users (id),
    create_dt                 TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt                 TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE documents (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rag_id        BIGINT      NOT NULL REFERENCES knowledge_bases (id) ON DELETE CASCADE,
    name          TEXT        NOT NULL,
    file_type     TEXT        NOT NULL,
    source_type   TEXT        NOT NULL DEFAULT 'local',
    source_path   TEXT        NOT NULL,
    storage_key   TEXT        NOT NULL,
    mime_type     TEXT        NOT NULL,
    file_size     BIGINT      NOT NULL,
    content_hash  TEXT        NOT NULL,
    status        TEXT        NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'parsing', 'chunking', 'embedding', 'success', 'failed')),
    progress      INT         NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 100),
    error_stage   TEXT,
    error_message TEXT,
    timings       JSONB       NOT NULL DEFAULT '{}'::jsonb,
    chunk_count   INT         NOT NULL DEFAULT 0,
    -- Bumped by every (re)processing request; a worker only finishes the run it started.
    run_id        UUID        NOT NULL DEFAULT gen_random_uuid(),
    lease_until   TIMESTAMPTZ,
    creator_id    BIGINT      NOT NULL REFERENCES users (id),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX documents_rag_idx ON documents (rag_id, created_at DESC);
CREATE INDEX documents_hash_idx ON documents (rag_id, content_hash);
CREATE INDEX documents_name_idx ON documents (rag_id, lower(name));

CREATE TABLE chunks (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rag_id          BIGINT      NOT NULL REFERENCES knowledge_bases (id) ON DELETE CASCADE,
    document_id     BIGINT      NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    paragraph_index INT         NOT NULL DEFAULT 0,
    chunk_index     INT         NOT NULL,
    content         TEXT        NOT NULL,
    token_count     INT         NOT NULL,
    title           TEXT,
    page            INT,
    chunk_type      TEXT        NOT NULL DEFAULT 'text',
    -- No fixed dimension: each knowledge base has a partial HNSW index on its own rows.
    embedding       vector,
    tsv             tsvector,
    vector_status   TEXT        NOT NULL DEFAULT 'pending',
    created_dt      TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt       TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX chunks_document_idx ON chunks (document_id, chunk_index);
CREATE INDEX chunks_rag_idx ON chunks (rag_id);
CREATE INDEX chunks_tsv_idx ON chunks USING gin (tsv);

CREATE TABLE document_images (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rag_id        BIGINT      NOT NULL REFERENCES knowledge_bases (id) ON DELETE CASCADE,
    document_id   BIGINT      NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    chunk_id      BIGINT REFERENCES chunks (id) ON DELETE SET NULL,
    resource_id   BIGINT REFERENCES resources (id) ON DELETE SET NULL,
    image_index   INT         NOT NULL,
    storage_key   TEXT        NOT NULL,
    mime_type     TEXT        NOT NULL,
    caption       TEXT,
    figure_no     TEXT,
    figure_title  TEXT,
    section_title TEXT,
    ocr_text      TEXT,
    source_page   INT,
    create_dt     TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt     TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX document_images_document_idx ON document_images (document_id);

-- An upload waiting for confirmation: its files are temporary resources until committed.
CREATE TABLE upload_previews (
    token      TEXT PRIMARY KEY,
    rag_id     BIGINT      NOT NULL REFERENCES knowledge_bases (id) ON DELETE CASCADE,
    creator_id BIGINT      NOT NULL REFERENCES users (id),
    items      JSONB       NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
