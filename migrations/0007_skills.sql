-- Skills: zip packages in object storage, described by their SKILL.md front matter.
-- `version` is bumped by every change of the package; writers compare and swap it so two
-- concurrent edits cannot silently lose one.

CREATE TABLE skills (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        TEXT        NOT NULL,
    description TEXT        NOT NULL DEFAULT '',
    file_name   TEXT        NOT NULL DEFAULT '',
    file_size   BIGINT      NOT NULL DEFAULT 0,
    storage_key TEXT        NOT NULL UNIQUE,
    version     BIGINT      NOT NULL DEFAULT 1,
    creator_id  BIGINT      NOT NULL REFERENCES users (id),
    create_dt   TIMESTAMPTZ NOT NULL DEFAULT now(),
    update_dt   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX skills_creator_idx ON skills (creator_id);
