//! External chat, streamed (NDJSON) and synchronous; app credentials or an embed token.

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use futures::StreamExt;
use shared::admission::Pending;
use shared::agents::chat::StreamEvent;
use shared::external::{chat, ExternalCaller, ExternalChatRequest, SyncAnswer};
use shared::http::{event_stream, Api, ApiResult, Envelope, Json};
use shared::{AppResult, AppState};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(chat_stream))
        .routes(routes!(chat_sync))
}

/// Chat as the external user `openId`. NDJSON lines as the admin chat: `thinking`, `text`,
/// `tool_call`, `tool_result`, then `done` (or `error`). Refusals are envelopes.
#[utoipa::path(post, path = "/openapi/v1/agent/chat", tag = "external",
    security(("svc_app_id" = [], "svc_token" = []), ("svc_auth" = [])), request_body = ExternalChatRequest,
    responses((status = 200, content_type = "application/x-ndjson", body = StreamEvent), (status = 400), (status = 401), (status = 403)))]
async fn chat_stream(
    State(state): State<AppState>,
    caller: ExternalCaller,
    count: Option<Extension<Pending>>,
    Json(req): Json<ExternalChatRequest>,
) -> AppResult<Response> {
    let events = chat::start(&state, &caller, req, count.map(|c| c.0)).await?;
    event_stream::response("application/x-ndjson", events.map(|e| e.ndjson()))
}

/// The same chat, answered in one envelope once complete (at most 120 s).
#[utoipa::path(post, path = "/openapi/v1/agent/chat/sync", tag = "external",
    security(("svc_app_id" = [], "svc_token" = []), ("svc_auth" = [])), request_body = ExternalChatRequest,
    responses((status = 200, body = Envelope<SyncAnswer>), (status = 400), (status = 401), (status = 403)))]
async fn chat_sync(
    State(state): State<AppState>,
    caller: ExternalCaller,
    count: Option<Extension<Pending>>,
    Json(req): Json<ExternalChatRequest>,
) -> ApiResult<SyncAnswer> {
    chat::sync(&state, &caller, req, count.map(|c| c.0)).await.map(Api)
}
