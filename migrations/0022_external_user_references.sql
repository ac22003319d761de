-- What refers to an external user, found by the user: deleting one (a refused first chat
-- removes the user it created unless another request stored something for it meanwhile; an
-- app's deletion removes all of its users) asked each of these tables by a key that led with
-- the agent, so Postgres scanned them whole.
CREATE INDEX IF NOT EXISTS conversations_external_user_idx ON conversations (external_user_id)
    WHERE external_user_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS external_subscriptions_user_idx ON external_subscriptions (external_user_id);
CREATE INDEX IF NOT EXISTS memories_external_user_idx ON memories (external_user_id)
    WHERE external_user_id IS NOT NULL;
