-- Users, sessions, login throttling, uploaded resources and app credentials.

CREATE TABLE users (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    username      TEXT        NOT NULL,
    password_hash TEXT        NOT NULL,
    email         TEXT,
    role          SMALLINT    NOT NULL CHECK (role IN (1, 2)),
    tokens        BIGINT      NOT NULL DEFAULT 0,
    totals        BIGINT      NOT NULL DEFAULT 0,
    expire_dt     TIMESTAMPTZ,
    create_dt     TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt     TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_username_key ON users (lower(username));
CREATE UNIQUE INDEX users_email_key ON users (lower(email)) WHERE email IS NOT NULL;

-- Refresh tokens are stored hashed; a family is one login's chain of rotations.
CREATE TABLE refresh_tokens (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    family_id  UUID        NOT NULL,
    user_id    BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash TEXT        NOT NULL UNIQUE,
    expires_at TIMESTAMPTZ NOT NULL,
    used_at    TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX refresh_tokens_family_idx ON refresh_tokens (family_id);
CREATE INDEX refresh_tokens_user_idx ON refresh_tokens (user_id);

-- Failed logins per key (`u:<username>` or `ip:<address>`), shared by every function instance.
CREATE TABLE login_throttle (
    key          TEXT PRIMARY KEY,
    failures     INT         NOT NULL,
    window_start TIMESTAMPTZ NOT NULL,
    locked_until TIMESTAMPTZ
);

CREATE TABLE resources (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    storage_key   TEXT        NOT NULL,
    original_name TEXT        NOT NULL,
    file_size     BIGINT      NOT NULL CHECK (file_size >= 0),
    mime_type     TEXT        NOT NULL,
    storage_type  TEXT        NOT NULL CHECK (storage_type IN ('LOCAL', 'OSS')),
    biz_type      TEXT,
    biz_id        BIGINT,
    content_hash  TEXT,
    creator_id    BIGINT      NOT NULL REFERENCES users (id),
    create_dt     TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT resources_storage_key_key UNIQUE (storage_key)
);
CREATE INDEX resources_creator_idx ON resources (creator_id, create_dt DESC);
CREATE INDEX resources_biz_idx ON resources (biz_type, biz_id);

-- Third-party applications; the token is kept encrypted because the admin UI shows it.
CREATE TABLE apps (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id         TEXT        NOT NULL,
    app_name       TEXT        NOT NULL,
    description    TEXT,
    token_enc      TEXT        NOT NULL,
    route_strategy TEXT        NOT NULL DEFAULT 'ROUND_ROBIN'
                   CHECK (route_strategy IN ('ROUND_ROBIN', 'RANDOM', 'HASH')),
    status         SMALLINT    NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    creator_id     BIGINT      NOT NULL REFERENCES users (id),
    create_dt      TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT apps_app_id_key UNIQUE (app_id)
);
