-- A memory config's embedding model can no longer be deleted from under it, as a knowledge
-- base's cannot: its memories' vectors are that model's. Set to NULL, recall and extraction fell
-- back to the default model, asked it for the config's dimension and failed on every turn (or,
-- at the same dimension, compared vectors of two models), while each extraction still paid for
-- its chat call first.
ALTER TABLE memory_configs
    DROP CONSTRAINT memory_configs_embedding_model_id_fkey,
    ADD CONSTRAINT memory_configs_embedding_model_id_fkey
        FOREIGN KEY (embedding_model_id) REFERENCES model_configs (id);
