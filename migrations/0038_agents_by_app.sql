-- Agents looked up by the app they are bound to: deleting an app counts them under the app's
-- row lock (the app's first-contact users and uploads wait meanwhile), and the partner API's
-- agent list puts them first. Without it each was a scan of every agent.
CREATE INDEX agents_app_id_idx ON agents (app_id) WHERE app_id IS NOT NULL;
