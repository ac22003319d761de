-- A message's agent is its conversation's: the conversation's foreign key already refuses an
-- unknown agent and deleting the agent already removes the conversation and its messages. The
-- second key locked the agent's row (FOR KEY SHARE) twice per chat turn, once per message, a
-- row every concurrent chat with that agent locks too. The column stays (analytics index).
ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_agent_id_fkey;
