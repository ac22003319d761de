//! What agent chat uses: the tools of an agent's servers and calls to them.

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, MetaObject, RequestMetaObject, ResourceContents,
};
use serde_json::Value;
use sqlx::PgPool;
use tracing::Instrument;

use super::repo::{self, Viewer};
use super::session::{Party, Target};
use super::{service, McpServerBrief, McpTool, ToolOutcome};
use crate::domain::{CurrentUser, Owner};
use crate::{AppResult, AppState};

/// Per server, in the order given: its tools, or why it cannot be used now (missing,
/// unreachable, refused the credentials ...), so that chat can go on without it and say so.
/// Tool lists come from the process's cache (MCP_TOOLS_TTL_SECS), in `party`'s own sessions.
/// Errors only for the database.
pub async fn tools_of_servers(
    state: &AppState,
    party: Owner,
    server_ids: &[i64],
) -> AppResult<Vec<(i64, Result<Vec<McpTool>, String>)>> {
    // Side by side: one slow server costs its own timeout, not the sum of all.
    futures::future::try_join_all(server_ids.iter().map(|&id| async move {
        let Some(row) = repo::find(state.db(), id).await? else {
            return Ok((id, Err(format!("MCP server {id} no longer exists"))));
        };
        // One server whose secrets no longer open (a key rotated without them) is that
        // server's failure, not every server's.
        let target = match Target::open(&row, state.secrets()) {
            Ok(target) => target.for_party(party_of(party)),
            Err(e) => {
                tracing::error!(server_id = id, error = %e, "an MCP server's stored secrets could not be opened");
                return Ok((
                    id,
                    Err(format!(
                        "MCP server {:?} is unusable: its stored credentials could not be opened",
                        row.name
                    )),
                ));
            }
        };
        let tools = state
            .mcp()
            .tools(&target, &super::limits(state))
            .await
            .map(|tools| tools.iter().map(|t| service::tool_of(id, &row.name, t)).collect())
            .map_err(|f| format!("MCP server {:?} is unusable: {}", row.name, f.message));
        Ok((id, tools))
    }))
    .await
}

/// `owner` as the session pool tells people chatting apart.
fn party_of(owner: Owner) -> Party {
    match owner {
        Owner::User(id) => Party::User(id),
        Owner::External(id) => Party::External(id),
    }
}

/// Calls one tool, in `party`'s own session of the server. The call is bounded by MCP_CALL_TIMEOUT_SECS (default 60; a timed-out stdio
/// server is killed) and its text by MCP_RESULT_MAX_BYTES (default 65536, cut at a character
/// boundary with a note). A server that is missing or fails, or arguments that are not an
/// object, give an `is_error` outcome the model can read; `Err` is left for database failures.
pub async fn call_tool(
    state: &AppState,
    party: Owner,
    server_id: i64,
    tool: &str,
    arguments: Value,
) -> AppResult<ToolOutcome> {
    let span = tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {tool}"),
        otel.kind = "client",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        mcp.server.id = server_id,
        mcp.transport = tracing::field::Empty,
        tool.outcome = tracing::field::Empty,
    );
    let outcome = call_tool_in(state, party, server_id, tool, arguments, &span)
        .instrument(span.clone())
        .await;
    let label = match &outcome {
        Ok(o) if o.is_error => "error",
        Ok(_) => "ok",
        Err(_) => "failed",
    };
    span.record("tool.outcome", label);
    outcome
}

async fn call_tool_in(
    state: &AppState,
    party: Owner,
    server_id: i64,
    tool: &str,
    arguments: Value,
    span: &tracing::Span,
) -> AppResult<ToolOutcome> {
    let limit = state.config().mcp_result_max_bytes;
    let failed = |text: String| {
        Ok(ToolOutcome {
            text: cap(text, limit),
            is_error: true,
        })
    };
    let arguments = match arguments {
        Value::Object(map) => Some(map),
        Value::Null => None,
        _ => return failed(format!("arguments of {tool} must be a JSON object")),
    };
    let Some(row) = repo::find(state.db(), server_id).await? else {
        return failed(format!("MCP server {server_id} no longer exists"));
    };
    span.record("mcp.transport", transport_name(row.transport_type));
    let target = Target::open(&row, state.secrets())?.for_party(party_of(party));
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = arguments;
    // The MCP way to carry a trace over any transport (SEP-414): the server continues it.
    if let Some(traceparent) = crate::telemetry::traceparent() {
        let mut meta = MetaObject::new();
        meta.set_traceparent(traceparent);
        params.meta = Some(RequestMetaObject(meta));
    }
    match state.mcp().call(&target, &super::limits(state), params).await {
        Ok(result) => Ok(ToolOutcome {
            is_error: result.is_error.unwrap_or(false),
            text: cap(result_text(&result), limit),
        }),
        // What the server answered (a JSON-RPC error) goes to the model as a tool error would,
        // and so does a time limit, in our own words; why it could not be reached often quotes
        // its address, which only those who may change the server see
        // (`mcp::service::tools`): the model, and through it whoever is chatting, gets the kind
        // of failure, the log the whole reason.
        Err(f) if f.protocol || f.timed_out => failed(format!(
            "calling {tool} on MCP server {:?} failed: {}",
            row.name, f.message
        )),
        Err(f) => {
            tracing::warn!(mcp.server.id = server_id, tool, reason = %f.message, "MCP tool call failed");
            failed(format!(
                "calling {tool} on MCP server {:?} failed: the server could not be reached or did not answer; \
                 its creator can test it for the reason",
                row.name
            ))
        }
    }
}

/// id, name, description, transportType and status of the given servers that exist, in order.
pub async fn briefs(db: &PgPool, ids: &[i64]) -> AppResult<Vec<McpServerBrief>> {
    Ok(repo::briefs(db, ids).await?)
}

/// Those of `ids` that exist and that `caller` may use (their own servers and administrators'
/// ones; administrators may use all), in the order given. An agent update compares it with
/// what it was sent.
pub async fn usable_ids(db: &PgPool, caller: &CurrentUser, ids: &[i64]) -> AppResult<Vec<i64>> {
    let viewer = Viewer {
        user_id: caller.id,
        admin: caller.is_admin(),
    };
    Ok(repo::visible_ids(db, viewer, ids).await?)
}

/// The result as text: text blocks as they are, other blocks named; structured content when
/// there is nothing else.
fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!("[image {}]", i.mime_type),
            ContentBlock::Audio(a) => format!("[audio {}]", a.mime_type),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource {uri}]\n{text}"),
                ResourceContents::BlobResourceContents { uri, .. } => format!("[binary resource {uri}]"),
                _ => "[resource]".to_owned(),
            },
            ContentBlock::ResourceLink(l) => format!("[resource link {}]", l.uri),
            _ => "[content of an unknown kind]".to_owned(),
        })
        .collect();
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    parts.join("\n")
}

/// Cuts `text` to at most `limit` bytes on a character boundary and says so.
fn cap(mut text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let total = text.len();
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!(
        "\n[truncated: the tool returned {total} bytes, the limit is {limit}]"
    ));
    text
}

fn transport_name(transport_type: i16) -> &'static str {
    match transport_type {
        1 => "sse",
        2 => "streamable-http",
        _ => "stdio",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_on_a_char_boundary() {
        assert_eq!(cap("short".into(), 10), "short");
        let capped = cap("aé€bcd".into(), 4);
        assert!(capped.starts_with("aé\n[truncated: the tool returned 9 bytes, the limit is 4]"));
    }

    #[test]
    fn joins_text_and_names_other_content() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "body"}}
            ]
        }))
        .unwrap();
        assert_eq!(
            result_text(&result),
            "hello\n[image image/png]\n[resource file:///a.txt]\nbody"
        );
        let structured: CallToolResult =
            serde_json::from_value(serde_json::json!({"content": [], "structuredContent": {"sum": 3}})).unwrap();
        assert_eq!(result_text(&structured), "{\"sum\":3}");
    }
}
