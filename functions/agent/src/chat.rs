//! The two streamed routes: agent chat (NDJSON) and agent creation (text signals).

use axum::extract::State;
use axum::response::Response;
use futures::StreamExt;
use serde::Deserialize;
use shared::admission::UserAdmission;
use shared::agents::chat::{self, ChatRequest, StreamEvent};
use shared::agents::create_stream;
use shared::http::{event_stream, CurrentUser, Json, Path};
use shared::{AppResult, AppState};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(chat_stream))
        .routes(routes!(create))
}

/// Chat with an agent. NDJSON lines: `thinking`, `text`, `tool_call`, `tool_result`, then `done`
/// (or `error` as the last line). Refusals (bad input, attachments, quota) are envelopes.
#[utoipa::path(post, path = "/agent/{agentId}/chat", tag = "agents", security(("svc_auth" = [])),
    params(("agentId" = i64, Path)), request_body = ChatRequest,
    responses((status = 200, content_type = "application/x-ndjson", body = StreamEvent), (status = 400), (status = 401), (status = 404)))]
async fn chat_stream(
    State(state): State<AppState>,
    user: UserAdmission,
    Path(agent_id): Path<i64>,
    Json(req): Json<ChatRequest>,
) -> AppResult<Response> {
    let events = chat::start_as_user(&state, user, agent_id, req).await?;
    event_stream::response("application/x-ndjson", events.map(|e| e.ndjson()))
}

#[derive(Debug, Deserialize, ToSchema)]
struct CreateRequest {
    /// What the agent should do.
    #[schema(required = true)]
    description: Option<String>,
}

/// Draft an agent with the default chat model and create it. Text lines: `[START]`,
/// `[FIELD_DONE]<field>:<value>` (values escaped: `\\`, `\n`, `\r`), `[DONE]<agentId>` or `[ERROR]<message>`.
#[utoipa::path(post, path = "/agent/create/stream", tag = "agents", security(("svc_auth" = [])), request_body = CreateRequest,
    responses((status = 200, content_type = "text/plain", body = String), (status = 400), (status = 401)))]
async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<CreateRequest>,
) -> AppResult<Response> {
    let lines = create_stream::start(&state, &user, req.description).await?;
    event_stream::response("text/plain; charset=utf-8", lines)
}
