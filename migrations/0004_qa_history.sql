-- Multi-turn knowledge-base Q&A: the turns of each conversation.

CREATE TABLE qa_messages (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rag_id          BIGINT      NOT NULL REFERENCES knowledge_bases (id) ON DELETE CASCADE,
    user_id         BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    conversation_id TEXT        NOT NULL,
    role            TEXT        NOT NULL CHECK (role IN ('user', 'assistant')),
    content         TEXT        NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX qa_messages_conversation_idx ON qa_messages (rag_id, user_id, conversation_id, id);
