-- Client nodes of apps (registered by heartbeat), kicks waiting to be told, and which
-- external user uploaded an image through the external API.

CREATE TABLE client_nodes (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id         BIGINT      NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    host_id        TEXT        NOT NULL,
    host_ip        TEXT        NOT NULL,
    grpc_port      INT         NOT NULL CHECK (grpc_port BETWEEN 1 AND 65535),
    max_concurrent INT         NOT NULL CHECK (max_concurrent >= 1),
    active_chats   INT         NOT NULL DEFAULT 0 CHECK (active_chats >= 0),
    labels         JSONB       NOT NULL DEFAULT '{}'::jsonb,
    expire_dt      TIMESTAMPTZ NOT NULL,
    create_dt      TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT client_nodes_host_key UNIQUE (app_id, host_id)
);

-- A kicked node is removed at once; its next heartbeat finds the kick, is told so, and the
-- kick is consumed (a later heartbeat registers the node afresh).
CREATE TABLE client_node_kicks (
    app_id    BIGINT      NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    host_id   TEXT        NOT NULL,
    kicked_dt TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, host_id)
);

CREATE TABLE external_resources (
    resource_id      BIGINT PRIMARY KEY REFERENCES resources (id) ON DELETE CASCADE,
    external_user_id BIGINT NOT NULL REFERENCES external_users (id) ON DELETE CASCADE
);
CREATE INDEX external_resources_user_idx ON external_resources (external_user_id);
