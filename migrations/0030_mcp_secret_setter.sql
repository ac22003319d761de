-- Who stored an MCP server's secret (its API key, bearer token or OAuth client secret). Whoever
-- else changes where the server connects sends the secret again, the server's creator included:
-- an administrator may have stored a secret of theirs in someone's server. Nullable, read as
-- the creator when NULL, as model configs' `key_set_by`. No foreign key: ids are never reused.
ALTER TABLE mcp_servers ADD COLUMN secret_set_by BIGINT;
UPDATE mcp_servers SET secret_set_by = creator_id;
