//! Wire shapes of MCP servers and the rows behind them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::AuthConfig;
use crate::crypto::{mask_secret, SecretBox};
use crate::time;
use crate::AppResult;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct McpRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub transport_type: i16,
    pub endpoint: Option<String>,
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env_vars_enc: Option<String>,
    pub auth_type: i16,
    pub auth_config_enc: Option<String>,
    /// Who stored the secret of `auth_config_enc` (the creator, or an administrator).
    pub secret_set_by: i64,
    pub status: String,
    pub last_error: Option<String>,
    pub last_connect_dt: Option<DateTime<Utc>>,
    pub tool_count: i32,
    pub creator_id: i64,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
    /// Its creator is an administrator now: its endpoints may reach the operator's networks.
    pub by_operator: bool,
}

impl McpRow {
    pub fn reach(&self) -> crate::outbound::Reach {
        crate::outbound::Reach::of_admin(self.by_operator)
    }
}

/// An MCP server as reads show it: secrets in `authConfig` and every `envVars` value masked;
/// to users who may not change the server, its catalogue entry only (see `catalogue`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerView {
    pub id: i64,
    pub name: String,
    pub description: String,
    /// 1 = SSE, 2 = Streamable HTTP, 3 = stdio.
    pub transport_type: i16,
    pub endpoint: Option<String>,
    pub command: Option<String>,
    pub args: Vec<String>,
    /// Values masked.
    pub env_vars: BTreeMap<String, String>,
    /// 0 none, 1 API key header, 2 bearer token, 3 OAuth 2.0 client credentials.
    pub auth_type: i16,
    /// Secret fields masked; null for authType 0.
    #[schema(value_type = Option<AuthConfigFields>)]
    pub auth_config: Value,
    /// `unknown`, `connected` or `error`.
    pub status: String,
    pub last_error: Option<String>,
    pub last_connect_dt: Option<String>,
    pub tool_count: i32,
    pub creator_id: i64,
    pub create_dt: String,
    pub update_dt: String,
}

impl McpServerView {
    pub fn new(row: McpRow, auth: &AuthConfig, env: &BTreeMap<String, String>) -> Self {
        Self {
            id: row.id,
            name: row.name,
            description: row.description,
            transport_type: row.transport_type,
            endpoint: row.endpoint,
            command: row.command,
            args: row.args,
            env_vars: env.iter().map(|(k, v)| (k.clone(), mask_secret(v))).collect(),
            auth_type: row.auth_type,
            auth_config: auth.masked(),
            status: row.status,
            last_error: row.last_error,
            last_connect_dt: row.last_connect_dt.map(time::datetime),
            tool_count: row.tool_count,
            creator_id: row.creator_id,
            create_dt: time::datetime(row.create_dt),
            update_dt: time::datetime(row.update_dt),
        }
    }
}

impl McpServerView {
    /// What users see of a server they may use but not change (an administrator's): what it
    /// is and whether it works, not where it lives or how it is started. Endpoints and
    /// arguments often carry tokens or internal addresses, and the last error quotes them.
    pub fn catalogue(row: McpRow) -> Self {
        let row = McpRow {
            endpoint: None,
            command: None,
            args: Vec::new(),
            env_vars_enc: None,
            auth_config_enc: None,
            last_error: None,
            ..row
        };
        Self::new(row, &AuthConfig::None, &BTreeMap::new())
    }
}

/// Create (name, transportType and endpoint or command required) or partial update.
#[derive(Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerRequest {
    pub name: Option<String>,
    pub description: Option<String>,
    /// 1 = SSE, 2 = Streamable HTTP, 3 = stdio.
    pub transport_type: Option<i64>,
    /// http(s) URL of the server (SSE: the `/sse` stream; Streamable HTTP: the MCP endpoint).
    pub endpoint: Option<String>,
    /// stdio: the program to start.
    pub command: Option<String>,
    /// stdio: its arguments (`null` clears them, as `[]` does).
    #[serde(default, deserialize_with = "crate::json::null_as_empty")]
    pub args: Option<Vec<String>>,
    /// stdio: environment variables for the process (credentials the tool needs); `null`
    /// clears them, as `{}` does.
    #[serde(default, deserialize_with = "crate::json::null_as_empty")]
    pub env_vars: Option<BTreeMap<String, String>>,
    /// 0 none (default), 1 API key header, 2 bearer token, 3 OAuth 2.0 client credentials.
    pub auth_type: Option<i64>,
    /// See the authentication types; masked values sent back keep the stored secret. `null`
    /// clears it, which only authType 0 takes.
    #[schema(value_type = Option<AuthConfigFields>)]
    #[serde(default, deserialize_with = "crate::json::nullable")]
    pub auth_config: Option<Option<Value>>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct McpFilter {
    /// Substring of the name or description.
    pub keyword: Option<String>,
}

/// `{id, name}` for selection lists.
#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct McpOption {
    pub id: i64,
    pub name: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolView {
    pub name: String,
    pub description: String,
    /// The tool's JSON Schema for its arguments.
    pub input_schema: Value,
}

/// Result of a connection test. A failure is a successful call with `success: false`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpTestResult {
    pub success: bool,
    pub message: String,
    pub response_time_ms: u64,
    pub tools: Vec<ToolView>,
}

/// What an agent's detail shows of each of its MCP servers.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct McpServerBrief {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub transport_type: i16,
    pub status: String,
}

/// A tool of an MCP server, as chat offers it to a model.
#[derive(Debug, Clone)]
pub struct McpTool {
    pub server_id: i64,
    pub server_name: String,
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// The outcome of one tool call: the text for the model, and whether the tool reported an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    pub text: String,
    pub is_error: bool,
}

/// `authConfig` by `authType`, for the API document.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum AuthConfigFields {
    /// 1: the header `key` with the value `value`, on every request.
    ApiKey { key: String, value: String },
    /// 2: `Authorization: Bearer <token>` (the token without the prefix).
    Bearer { token: String },
    /// 3: OAuth 2.0 client credentials, fetched from `tokenUrl` and renewed before expiry.
    #[serde(rename_all = "camelCase")]
    OAuth2 {
        client_id: String,
        client_secret: String,
        token_url: String,
    },
}

impl McpRow {
    /// The auth config and env vars of the row, decrypted.
    pub fn open_secrets(&self, secrets: &SecretBox) -> AppResult<(AuthConfig, BTreeMap<String, String>)> {
        let auth = match &self.auth_config_enc {
            Some(sealed) => serde_json::from_str(&secrets.open(sealed)?)
                .map_err(|e| anyhow::anyhow!("MCP server {}: stored authConfig unreadable: {e}", self.id))?,
            None => AuthConfig::None,
        };
        let env = match &self.env_vars_enc {
            Some(sealed) => serde_json::from_str(&secrets.open(sealed)?)
                .map_err(|e| anyhow::anyhow!("MCP server {}: stored envVars unreadable: {e}", self.id))?,
            None => BTreeMap::new(),
        };
        Ok((auth, env))
    }
}
