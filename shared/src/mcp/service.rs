//! Business rules of MCP servers.
//!
//! Who may do what: administrators everything. A regular user sees and uses the servers they
//! created and those administrators created (a shared catalogue), and changes, deletes and
//! tests only their own. Only administrators may create or change stdio servers: their
//! command runs on the service's host; and only when the operator enabled stdio and listed the
//! command (see `stdio`).

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;
use sqlx::PgConnection;

use super::repo::{self, Fields, Viewer};
use super::session::{Target, STDIO};
use super::*;
use crate::creation_cap::{self, Created};
use crate::crypto::{is_masked, SecretBox};
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::error::is_unique_violation;
use crate::outbound::Reach;
use crate::{validate, AppError, AppResult, AppState};

const MAX_ARGS: usize = 100;
const MAX_ENV_VARS: usize = 100;
const MAX_ENV_NAME_CHARS: usize = 256;
/// A variable's value: the system refuses a larger one (128 KiB) when the server starts, which
/// showed up as a server that cannot be reached, not as this field.
const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;

pub fn viewer(user: &CurrentUser) -> Viewer {
    Viewer {
        user_id: user.id,
        admin: user.is_admin(),
    }
}

/// The server as `user` may see it: whoever may change it sees its whole configuration,
/// everyone else (users looking at an administrator's server) the catalogue entry only.
fn view(state: &AppState, user: &CurrentUser, row: McpRow) -> AppResult<McpServerView> {
    if !user.can_manage(row.creator_id) {
        return Ok(McpServerView::catalogue(row));
    }
    let (auth, env) = row.open_secrets(state.secrets())?;
    Ok(McpServerView::new(row, &auth, &env))
}

/// A row the caller may see, else 404 (servers of other users are not revealed).
async fn visible(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<McpRow> {
    let not_found = || AppError::not_found("MCP server");
    if repo::visible_ids(state.db(), viewer(user), &[id]).await?.is_empty() {
        return Err(not_found());
    }
    repo::find(state.db(), id).await?.ok_or_else(not_found)
}

/// A row the caller may change: 404 when invisible, 403 when only visible.
async fn owned(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<McpRow> {
    let row = visible(state, user, id).await?;
    if !user.can_manage(row.creator_id) {
        return Err(AppError::Forbidden(
            "only the creator or an administrator may change this MCP server".into(),
        ));
    }
    Ok(row)
}

pub async fn page(
    state: &AppState,
    user: &CurrentUser,
    paging: PageQuery,
    f: McpFilter,
) -> AppResult<Page<McpServerView>> {
    let keyword = validate::optional(f.keyword);
    let (rows, total) = repo::page(
        state.db(),
        viewer(user),
        keyword.as_deref(),
        paging.size(),
        paging.offset(),
    )
    .await?;
    let views = rows
        .into_iter()
        .map(|r| view(state, user, r))
        .collect::<AppResult<_>>()?;
    Ok(Page::new(views, paging, total))
}

pub async fn options(state: &AppState, user: &CurrentUser) -> AppResult<Vec<McpOption>> {
    Ok(repo::options(state.db(), viewer(user)).await?)
}

pub async fn get(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<McpServerView> {
    view(state, user, visible(state, user, id).await?)
}

/// The fields of a server after validation, secrets sealed.
struct Valid {
    name: String,
    description: String,
    transport_type: i16,
    endpoint: Option<String>,
    command: Option<String>,
    args: Vec<String>,
    env_vars_enc: Option<String>,
    auth_type: i16,
    auth_config_enc: Option<String>,
    secret_set_by: i64,
}

impl Valid {
    fn fields(&self) -> Fields<'_> {
        Fields {
            name: &self.name,
            description: &self.description,
            transport_type: self.transport_type,
            endpoint: self.endpoint.as_deref(),
            command: self.command.as_deref(),
            args: &self.args,
            env_vars_enc: self.env_vars_enc.as_deref(),
            auth_type: self.auth_type,
            auth_config_enc: self.auth_config_enc.as_deref(),
            secret_set_by: self.secret_set_by,
        }
    }
}

fn transport_type(value: i64) -> AppResult<i16> {
    match value {
        1..=3 => Ok(value as i16),
        _ => Err(AppError::validation(
            "transportType must be 1 (SSE), 2 (Streamable HTTP) or 3 (stdio)",
        )),
    }
}

fn env_vars(sent: BTreeMap<String, String>, stored: &BTreeMap<String, String>) -> AppResult<BTreeMap<String, String>> {
    if sent.len() > MAX_ENV_VARS {
        return Err(AppError::validation(format!(
            "envVars may hold at most {MAX_ENV_VARS} variables"
        )));
    }
    let mut out = BTreeMap::new();
    for (key, value) in sent {
        let valid_name = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name || key.len() > MAX_ENV_NAME_CHARS {
            return Err(AppError::validation(format!(
                "envVars key {key:?} must be a variable name (letters, digits and _, not starting with a digit) \
                 of at most {MAX_ENV_NAME_CHARS} characters"
            )));
        }
        super::stdio::check_env(&key)?;
        let value = if is_masked(&value) {
            stored.get(&key).cloned().ok_or_else(|| {
                AppError::validation(format!(
                    "envVars.{key} is a masked value but no value is stored for it: send the real value"
                ))
            })?
        } else {
            value
        };
        if value.contains('\0') {
            return Err(AppError::validation(format!(
                "envVars.{key} must not contain NUL characters"
            )));
        }
        if value.len() > MAX_ENV_VALUE_BYTES {
            return Err(AppError::validation(format!(
                "envVars.{key} must be at most {MAX_ENV_VALUE_BYTES} bytes"
            )));
        }
        out.insert(key, value);
    }
    Ok(out)
}

/// Checks a create (`stored` = None) or the merge of an update over the stored row. Fields that
/// belong to the other kind of transport are refused when sent, and dropped when only stored.
async fn validate(
    state: &AppState,
    user: &CurrentUser,
    req: McpServerRequest,
    stored: Option<(&McpRow, &AuthConfig, &BTreeMap<String, String>)>,
) -> AppResult<Valid> {
    let row = stored.map(|s| s.0);
    // Names go into the tool descriptions models read, and into every user's lists.
    let name = match req.name {
        Some(n) => {
            let n = validate::required("name", Some(n))?;
            validate::printable("name", &n, false)?;
            n
        }
        None => match row {
            Some(r) => r.name.clone(),
            None => return Err(AppError::validation("name is required")),
        },
    };
    validate::length("name", &name, 1, 100)?;
    let sent_description = req.description.map(|d| d.trim().to_owned());
    if let Some(d) = &sent_description {
        validate::printable("description", d, true)?;
    }
    let description = sent_description
        .or_else(|| row.map(|r| r.description.clone()))
        .unwrap_or_default();
    validate::length("description", &description, 0, 1000)?;
    let transport = match req.transport_type {
        Some(t) => transport_type(t)?,
        None => match row {
            Some(r) => r.transport_type,
            None => return Err(AppError::validation("transportType is required")),
        },
    };
    let stdio = transport == STDIO;
    let same_kind = row.is_some_and(|r| (r.transport_type == STDIO) == stdio);
    if stdio {
        if req.endpoint.as_deref().is_some_and(|e| !e.trim().is_empty()) {
            return Err(AppError::validation(
                "endpoint applies to transportType 1 and 2; stdio (3) takes command and args",
            ));
        }
        if !user.is_admin() {
            return Err(AppError::Forbidden(
                "only administrators may configure stdio (transportType 3) servers: their command runs on the service host"
                    .into(),
            ));
        }
    } else if req.command.as_deref().is_some_and(|c| !c.trim().is_empty())
        || req.args.as_ref().is_some_and(|a| !a.is_empty())
        || req.env_vars.as_ref().is_some_and(|e| !e.is_empty())
    {
        return Err(AppError::validation(
            "command, args and envVars apply to transportType 3 (stdio) only",
        ));
    }
    let (endpoint, command, args, env) = if stdio {
        let command = validate::optional(req.command)
            .or_else(|| row.filter(|_| same_kind).and_then(|r| r.command.clone()))
            .ok_or_else(|| AppError::validation("command is required for transportType 3 (stdio)"))?;
        validate::length("command", &command, 1, 500)?;
        state.mcp().stdio_policy().check(&command)?;
        let args = match req.args {
            Some(a) => a,
            None => row.filter(|_| same_kind).map(|r| r.args.clone()).unwrap_or_default(),
        };
        if args.len() > MAX_ARGS {
            return Err(AppError::validation(format!("args may hold at most {MAX_ARGS} items")));
        }
        if args.iter().any(|a| a.contains('\0') || a.chars().count() > 2000) {
            return Err(AppError::validation(
                "each of args must be at most 2000 characters, without NUL",
            ));
        }
        let stored_env = stored.filter(|_| same_kind).map(|s| s.2.clone()).unwrap_or_default();
        let keeps_stored = match &req.env_vars {
            Some(sent) => sent.values().any(|v| is_masked(v)),
            None => !stored_env.is_empty(),
        };
        // As with authConfig below: values its creator stored go only to the program its
        // creator named; someone else changing the program sends them again.
        let moved = row.is_some_and(|r| {
            r.creator_id != user.id && (r.command.as_deref() != Some(command.as_str()) || r.args != args)
        });
        if moved && keeps_stored {
            return Err(AppError::validation(
                "envVars: send the values again to change command or args; the stored ones are the server creator's",
            ));
        }
        let env = match req.env_vars {
            Some(sent) => env_vars(sent, &stored_env)?,
            None => stored_env,
        };
        (None, Some(command), args, env)
    } else {
        let endpoint = validate::optional(req.endpoint)
            .or_else(|| row.filter(|_| same_kind).and_then(|r| r.endpoint.clone()))
            .ok_or_else(|| {
                AppError::validation("endpoint is required for transportType 1 (SSE) and 2 (Streamable HTTP)")
            })?;
        validate::length("endpoint", &endpoint, 1, 2000)?;
        validate::http_url("endpoint", &endpoint)?;
        (Some(endpoint), None, Vec::new(), BTreeMap::new())
    };
    let stored_auth = stored.map(|s| s.1);
    // `null` clears the credentials: refused by every type but 0 (none), as an absent config
    // is for a new server. Taken as absent, it answered 200 and kept them in force.
    let cleared = matches!(req.auth_config, Some(None));
    let sent_config = req.auth_config.as_ref().and_then(Option::as_ref);
    let auth = match (req.auth_type, sent_config, stored_auth) {
        (t, None, Some(a)) if cleared => AuthConfig::parse(t.unwrap_or(i64::from(a.code())), None, None)?,
        // Only authConfig sent: it belongs to the stored type.
        (None, Some(raw), Some(a)) => AuthConfig::parse(i64::from(a.code()), Some(raw), Some(a))?,
        (None, None, Some(a)) => a.clone(),
        (Some(t), None, Some(a)) if t == i64::from(a.code()) => a.clone(),
        (t, raw, _) => AuthConfig::parse(t.unwrap_or(0), raw, stored_auth)?,
    };
    // A program takes no HTTP credentials: stored, they would show as in force and reach
    // nothing. Refused when asked for, or kept from an HTTP server turned into a program.
    let auth_asked = req.auth_type.is_some() || req.auth_config.is_some() || !same_kind;
    if stdio && auth.code() != 0 && auth_asked {
        return Err(AppError::validation(
            "authType applies to transportType 1 and 2; a stdio (3) server takes its credentials in envVars (send authType 0)",
        ));
    }
    // A stored secret goes where whoever stored it said: anyone else pointing the server
    // elsewhere sends the secret again, or could read it at their address. That includes the
    // server's creator, when an administrator stored a secret of theirs in it.
    let secret_set_by = match (row, stored_auth) {
        (Some(r), Some(stored)) if auth.keeps_secret_of(stored) => {
            if r.secret_set_by != user.id && auth.points_elsewhere(stored, (r.endpoint.as_deref(), endpoint.as_deref()))
            {
                return Err(AppError::validation(
                    "authConfig: send the secret again to point this server elsewhere; the stored one was set by another user",
                ));
            }
            r.secret_set_by
        }
        _ => user.id,
    };
    // Checked against the networks of whoever created the server: the caller for a new one.
    let reach = row.map_or(Reach::of_admin(user.is_admin()), McpRow::reach);
    let deny = state.config().outbound.deny(reach);
    if let Some(e) = &endpoint {
        deny.check_url("endpoint", e).await?;
    }
    if let AuthConfig::OAuth2 { token_url, .. } = &auth {
        deny.check_url("authConfig.tokenUrl", token_url).await?;
    }
    Ok(Valid {
        name,
        description,
        transport_type: transport,
        endpoint,
        command,
        args,
        env_vars_enc: if env.is_empty() {
            None
        } else {
            Some(seal_json(state.secrets(), &env)?)
        },
        auth_type: auth.code(),
        auth_config_enc: if auth == AuthConfig::None {
            None
        } else {
            Some(seal_json(state.secrets(), &auth)?)
        },
        secret_set_by,
    })
}

fn seal_json<T: serde::Serialize>(secrets: &SecretBox, value: &T) -> AppResult<String> {
    let json = serde_json::to_string(value).map_err(|e| AppError::Internal(e.into()))?;
    secrets.seal(&json)
}

fn name_taken(name: &str) -> AppError {
    AppError::business(format!("name: an MCP server named {name:?} already exists"))
}

fn duplicate(err: sqlx::Error, name: &str) -> AppError {
    if is_unique_violation(&err, "mcp_servers_creator_name_key") {
        name_taken(name)
    } else {
        err.into()
    }
}

/// Names are unique among the servers the caller can see, and only those can clash: a clash
/// with another user's private server would tell that it exists. (The database keeps names
/// unique per creator; this check adds the administrators' shared ones.)
/// Asked on the transaction that holds the name's lock: on another pooled connection, every
/// create holding one connection while it waited for a second could empty the pool.
async fn check_name_free(conn: &mut PgConnection, owner: Viewer, name: &str, except: Option<i64>) -> AppResult<()> {
    if repo::visible_name_taken(conn, owner, owner.user_id, name, except).await? {
        return Err(name_taken(name));
    }
    Ok(())
}

pub async fn create(state: &AppState, user: &CurrentUser, req: McpServerRequest) -> AppResult<i64> {
    let valid = validate(state, user, req, None).await?;
    let mut tx = state.db().begin().await?;
    creation_cap::check(&mut tx, state.config(), user, Created::McpServer).await?;
    repo::lock_name(&mut tx, &valid.name).await?;
    check_name_free(&mut tx, viewer(user), &valid.name, None).await?;
    let id = repo::insert(&mut *tx, &valid.fields(), user.id)
        .await
        .map_err(|e| duplicate(e, &valid.name))?;
    tx.commit().await?;
    Ok(id)
}

pub async fn update(state: &AppState, user: &CurrentUser, id: i64, req: McpServerRequest) -> AppResult<()> {
    let row = owned(state, user, id).await?;
    if row.transport_type == STDIO && !user.is_admin() {
        return Err(AppError::Forbidden(
            "only administrators may change stdio (transportType 3) servers".into(),
        ));
    }
    let (auth, env) = row.open_secrets(state.secrets())?;
    let valid = validate(state, user, req, Some((&row, &auth, &env))).await?;
    let mut tx = state.db().begin().await?;
    repo::lock_name(&mut tx, &valid.name).await?;
    // Among what the server's owner sees, and only when the name changes: an administrator
    // editing a user's server sees every server, and any other of that name refused the edit.
    if valid.name.to_lowercase() != row.name.to_lowercase() {
        let owner = Viewer {
            user_id: row.creator_id,
            admin: row.by_operator,
        };
        check_name_free(&mut tx, owner, &valid.name, Some(id)).await?;
    }
    let written = repo::update(&mut *tx, id, row.update_dt, &valid.fields())
        .await
        .map_err(|e| duplicate(e, &valid.name))?;
    if !written {
        return Err(AppError::changed_meanwhile("MCP server"));
    }
    tx.commit().await?;
    state.mcp().invalidate(id);
    Ok(())
}

pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    owned(state, user, id).await?;
    let mut tx = state.db().begin().await?;
    repo::delete(&mut tx, id).await?;
    tx.commit().await?;
    state.mcp().invalidate(id);
    Ok(())
}

fn tool_view(tool: &rmcp::model::Tool) -> ToolView {
    ToolView {
        name: tool.name.to_string(),
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        input_schema: Value::Object((*tool.input_schema).clone()),
    }
}

/// The server's tools for a route someone waits on (the test, the tool list), within
/// `MCP_TEST_TIMEOUT_SECS`: the chat's limits (a session in 30 s, a list in 60, twice over for
/// OAuth's retry) passed API Gateway's 29 s, and the caller got the gateway's 504.
async fn tools_within(
    state: &AppState,
    target: &Target,
) -> Result<std::sync::Arc<Vec<rmcp::model::Tool>>, super::session::Failure> {
    let limit = state.config().mcp_test_timeout;
    tokio::time::timeout(limit, state.mcp().tools(target, &super::limits(state)))
        .await
        .unwrap_or_else(|_| {
            Err(super::session::Failure::timed_out(format!(
                "the server did not list its tools within {} s",
                limit.as_secs()
            )))
        })
}

/// Connects afresh, lists the tools and records the outcome as the server's status.
pub async fn test(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<McpTestResult> {
    let row = owned(state, user, id).await?;
    let target = Target::open(&row, state.secrets())?;
    // Afresh in the test's own session: ending every session cut the chats' calls in flight.
    state.mcp().reconnect(&target);
    let started = Instant::now();
    let outcome = tools_within(state, &target).await;
    let response_time_ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(tools) => {
            repo::mark_connected(state.db(), id, row.update_dt, tools.len() as i32, chrono::Utc::now()).await?;
            Ok(McpTestResult {
                success: true,
                message: format!("connected; {} tools", tools.len()),
                response_time_ms,
                tools: tools.iter().map(tool_view).collect(),
            })
        }
        Err(f) => {
            // The server's own words are quoted, and a NUL among them is refused by Postgres.
            let message = crate::text::prefix_chars(&crate::text::model_text(&f.message), 1000).to_owned();
            tracing::info!(server_id = id, error = %message, "MCP connection test failed");
            repo::mark_error(state.db(), id, row.update_dt, &message).await?;
            Ok(McpTestResult {
                success: false,
                message,
                response_time_ms,
                tools: Vec::new(),
            })
        }
    }
}

/// The server's tools (cached briefly); a failure is a business error naming the reason.
pub async fn tools(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<Vec<ToolView>> {
    let row = visible(state, user, id).await?;
    let target = Target::open(&row, state.secrets())?;
    let tools = tools_within(state, &target).await.map_err(|f| {
        // The reason often quotes the endpoint, which only those who may change the server see.
        let reason = match user.can_manage(row.creator_id) {
            true => f.message,
            false => "its creator can test it for the reason".to_owned(),
        };
        AppError::business(format!("MCP server {:?} is unusable: {reason}", row.name))
    })?;
    Ok(tools.iter().map(tool_view).collect())
}

pub(super) fn tool_of(row_id: i64, server_name: &str, tool: &rmcp::model::Tool) -> McpTool {
    let v = tool_view(tool);
    McpTool {
        server_id: row_id,
        server_name: server_name.to_owned(),
        name: v.name,
        description: v.description,
        input_schema: v.input_schema,
    }
}
