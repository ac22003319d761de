-- Who stored a config's API key. Its creator may point the config elsewhere without sending the
-- key again only while the key is their own (an administrator may have stored one of theirs),
-- and a config turns GLOBAL only with a key of the administrator making it so. Nullable, read
-- as the creator when NULL: code that predates the column still inserts configs. No foreign
-- key: a deleted user's id stays, and matches nobody (ids are never reused).
ALTER TABLE model_configs ADD COLUMN key_set_by BIGINT;
UPDATE model_configs SET key_set_by = creator_id;
