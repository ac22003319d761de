-- Answers of the extraction model that broke the output contract for the messages after
-- `last_message_id`; reset when the extraction moves on. After a few such answers the messages
-- are passed over, so a window no answer fits is not asked (and paid for) again at every turn.
ALTER TABLE memory_extractions ADD COLUMN unusable_answers INT NOT NULL DEFAULT 0;
