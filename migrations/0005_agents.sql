-- Agents, subscriptions, external (per-app) users, conversations and their messages.

CREATE TABLE agents (
    id                     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                   TEXT        NOT NULL,
    description            TEXT        NOT NULL DEFAULT '',
    avatar                 TEXT        NOT NULL DEFAULT '',
    instruction            TEXT        NOT NULL DEFAULT '',
    greeting               TEXT        NOT NULL DEFAULT '',
    preset_questions       TEXT[]      NOT NULL DEFAULT '{}',
    chat_model_id          BIGINT REFERENCES model_configs (id) ON DELETE SET NULL,
    mcp_enabled            BOOLEAN     NOT NULL DEFAULT FALSE,
    mcp_server_ids         BIGINT[]    NOT NULL DEFAULT '{}',
    skill_enabled          BOOLEAN     NOT NULL DEFAULT FALSE,
    skill_ids              BIGINT[]    NOT NULL DEFAULT '{}',
    web_search_enabled     BOOLEAN     NOT NULL DEFAULT FALSE,
    rag_enabled            BOOLEAN     NOT NULL DEFAULT FALSE,
    rag_id                 BIGINT REFERENCES knowledge_bases (id) ON DELETE SET NULL,
    memory_enabled         BOOLEAN     NOT NULL DEFAULT FALSE,
    memory_config_id       BIGINT,
    short_term_memory_size INT         NOT NULL DEFAULT 20 CHECK (short_term_memory_size BETWEEN 0 AND 200),
    is_featured            BOOLEAN     NOT NULL DEFAULT FALSE,
    app_id                 TEXT REFERENCES apps (app_id) ON DELETE SET NULL,
    status                 SMALLINT    NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    view_count             BIGINT      NOT NULL DEFAULT 0,
    creator_id             BIGINT      NOT NULL REFERENCES users (id),
    create_dt              TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt              TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX agents_creator_idx ON agents (creator_id);

CREATE TABLE agent_subscriptions (
    agent_id  BIGINT      NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    user_id   BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    create_dt TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, user_id)
);
CREATE INDEX agent_subscriptions_user_idx ON agent_subscriptions (user_id);

-- A partner's end user, known by the partner's own openId within one app.
CREATE TABLE external_users (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id    BIGINT      NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    open_id   TEXT        NOT NULL,
    nickname  TEXT        NOT NULL DEFAULT '',
    avatar    TEXT        NOT NULL DEFAULT '',
    extra     JSONB       NOT NULL DEFAULT '{}'::jsonb,
    create_dt TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT external_users_open_id_key UNIQUE (app_id, open_id)
);

CREATE TABLE external_subscriptions (
    agent_id         BIGINT      NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    external_user_id BIGINT      NOT NULL REFERENCES external_users (id) ON DELETE CASCADE,
    create_dt        TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, external_user_id)
);

-- A conversation belongs to one agent and exactly one owner: an admin-API user or an external
-- user. The client picks `conversation_key`; two owners may pick the same one without meeting.
CREATE TABLE conversations (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_key TEXT        NOT NULL,
    agent_id         BIGINT      NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    user_id          BIGINT REFERENCES users (id) ON DELETE CASCADE,
    external_user_id BIGINT REFERENCES external_users (id) ON DELETE CASCADE,
    title            TEXT        NOT NULL DEFAULT '',
    create_dt        TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_message_dt  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((user_id IS NULL) <> (external_user_id IS NULL))
);
CREATE UNIQUE INDEX conversations_user_key ON conversations (agent_id, user_id, conversation_key)
    WHERE user_id IS NOT NULL;
CREATE UNIQUE INDEX conversations_external_key ON conversations (agent_id, external_user_id, conversation_key)
    WHERE external_user_id IS NOT NULL;
CREATE INDEX conversations_agent_idx ON conversations (agent_id, last_message_dt DESC);

-- status: 0 generating, 1 complete, 2 failed, 3 stopped (client went away).
CREATE TABLE messages (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id   BIGINT      NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    agent_id          BIGINT      NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    role              TEXT        NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    content           TEXT        NOT NULL DEFAULT '',
    thinking          TEXT,
    attachments       JSONB       NOT NULL DEFAULT '[]'::jsonb,
    tool_calls        JSONB       NOT NULL DEFAULT '[]'::jsonb,
    tool_call_count   INT         NOT NULL DEFAULT 0,
    status            SMALLINT    NOT NULL DEFAULT 1 CHECK (status IN (0, 1, 2, 3)),
    error             TEXT,
    model_id          BIGINT REFERENCES model_configs (id) ON DELETE SET NULL,
    prompt_tokens     BIGINT      NOT NULL DEFAULT 0,
    completion_tokens BIGINT      NOT NULL DEFAULT 0,
    duration_ms       BIGINT,
    create_dt         TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX messages_conversation_idx ON messages (conversation_id, id);
CREATE INDEX messages_agent_time_idx ON messages (agent_id, create_dt);
