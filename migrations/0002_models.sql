-- Model providers, model configs (CHAT / EMBEDDING / RERANKER) and per-call usage.

CREATE TABLE model_providers (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_name TEXT        NOT NULL,
    provider_key  TEXT        NOT NULL,
    description   TEXT,
    icon_url      TEXT,
    is_enabled    BOOLEAN     NOT NULL DEFAULT TRUE,
    created_dt    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_dt    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT model_providers_key_key UNIQUE (provider_key)
);

CREATE TABLE model_configs (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_id  BIGINT      NOT NULL REFERENCES model_providers (id),
    model_name   TEXT        NOT NULL,
    model_key    TEXT        NOT NULL,
    model_type   TEXT        NOT NULL CHECK (model_type IN ('CHAT', 'EMBEDDING', 'RERANKER')),
    adapter_key  TEXT        NOT NULL,
    api_key_enc  TEXT        NOT NULL,
    api_endpoint TEXT        NOT NULL,
    description  TEXT,
    config_json  JSONB       NOT NULL DEFAULT '{}'::jsonb,
    scope        TEXT        NOT NULL DEFAULT 'GLOBAL' CHECK (scope IN ('GLOBAL', 'PERSONAL')),
    is_default   BOOLEAN     NOT NULL DEFAULT FALSE,
    is_enabled   BOOLEAN     NOT NULL DEFAULT TRUE,
    creator_id   BIGINT      NOT NULL REFERENCES users (id),
    created_dt   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_dt   TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- At most one default per model type, enforced by the database itself.
CREATE UNIQUE INDEX model_configs_one_default ON model_configs (model_type) WHERE is_default;
CREATE INDEX model_configs_type_idx ON model_configs (model_type, is_enabled);

-- One row per upstream call. Names are copied so stats survive a deleted config.
CREATE TABLE model_usage (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model_id          BIGINT REFERENCES model_configs (id) ON DELETE SET NULL,
    model_name        TEXT             NOT NULL,
    model_type        TEXT             NOT NULL,
    provider_id       BIGINT,
    provider_name     TEXT,
    user_id           BIGINT REFERENCES users (id) ON DELETE SET NULL,
    call_kind         TEXT             NOT NULL,
    prompt_tokens     BIGINT           NOT NULL DEFAULT 0,
    completion_tokens BIGINT           NOT NULL DEFAULT 0,
    latency_ms        BIGINT           NOT NULL,
    success           BOOLEAN          NOT NULL,
    error             TEXT,
    cost              DOUBLE PRECISION NOT NULL DEFAULT 0,
    created_at        TIMESTAMPTZ      NOT NULL DEFAULT now()
);
CREATE INDEX model_usage_model_idx ON model_usage (model_id);
CREATE INDEX model_usage_user_idx ON model_usage (user_id, model_id);
