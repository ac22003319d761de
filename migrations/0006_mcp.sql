-- MCP tool servers. Credentials (authConfig, envVars) are sealed with the service key as whole
-- JSON documents: no column holds a secret in clear.

CREATE TABLE mcp_servers (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             TEXT        NOT NULL,
    description      TEXT        NOT NULL DEFAULT '',
    transport_type   SMALLINT    NOT NULL CHECK (transport_type IN (1, 2, 3)),
    endpoint         TEXT,
    command          TEXT,
    args             TEXT[]      NOT NULL DEFAULT '{}',
    env_vars_enc     TEXT,
    auth_type        SMALLINT    NOT NULL DEFAULT 0 CHECK (auth_type BETWEEN 0 AND 3),
    auth_config_enc  TEXT,
    status           TEXT        NOT NULL DEFAULT 'unknown' CHECK (status IN ('unknown', 'connected', 'error')),
    last_error       TEXT,
    last_connect_dt  TIMESTAMPTZ,
    tool_count       INT         NOT NULL DEFAULT 0,
    creator_id       BIGINT      NOT NULL REFERENCES users (id),
    create_dt        TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Changes only with the configuration (not with test results): pooled sessions compare it.
    update_dt        TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX mcp_servers_name_key ON mcp_servers (lower(name));
CREATE INDEX mcp_servers_creator_idx ON mcp_servers (creator_id);
