-- A message's conversation is kept without a foreign key. Messages are written by one
-- statement only, the chat turn's, which creates or updates their conversation in the same
-- statement and holds its row until it commits: the key's checks, two per turn, only read again
-- a row the statement had just written, through the primary key's entries for every version
-- the turns' updates leave (or, on a new deployment's small table, by a sequential scan of all
-- of them). 32 concurrent turns ran 12-33% fewer turns per second with the key (pgbench).
-- Deleting a conversation, directly or through its agent or owner, still deletes its messages:
-- the trigger does what the key's ON DELETE CASCADE did, one conversation at a time.
ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_conversation_id_fkey;

CREATE OR REPLACE FUNCTION delete_conversation_messages() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM messages WHERE conversation_id = OLD.id;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS conversations_delete_messages ON conversations;
CREATE TRIGGER conversations_delete_messages AFTER DELETE ON conversations
    FOR EACH ROW EXECUTE FUNCTION delete_conversation_messages();
