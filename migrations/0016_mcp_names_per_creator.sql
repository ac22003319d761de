-- MCP server names were unique across all users, so creating a server named like another
-- user's private one answered "already exists" and revealed it. Names are now unique per
-- creator; the service also refuses names the creator can already see (administrators'
-- shared servers), which no index can express.
DROP INDEX mcp_servers_name_key;
CREATE UNIQUE INDEX mcp_servers_creator_name_key ON mcp_servers (creator_id, lower(name));
