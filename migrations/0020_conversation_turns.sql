-- How many turns a conversation has had, kept by the statement that starts a turn, which tells
-- the first turn (the one that gets a written title) by it. It used to ask whether the
-- conversation had any message, and the planner answered that with a scan of `messages` from
-- its start whenever its statistics said conversations were few and long.
ALTER TABLE conversations ADD COLUMN IF NOT EXISTS turns INT NOT NULL DEFAULT 0;
UPDATE conversations c SET turns = t.n
FROM (SELECT conversation_id, count(*) AS n FROM messages WHERE role = 'user' GROUP BY conversation_id) t
WHERE t.conversation_id = c.id;
