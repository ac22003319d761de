//! `/rag/search` and `/rag/qa/stream`, and the same two for external systems under
//! `/open-api/rag` (raw text stream there).

use axum::extract::State;
use axum::response::Response;
use futures::StreamExt;
use shared::http::{event_stream, Api, ApiResult, CurrentUser, Envelope, Json};
use shared::rag::qa::{self, QaEvent, QaRequest};
use shared::rag::search::{self, SearchRequest, SearchResponse};
use shared::{AppResult, AppState};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    qa_router().routes(routes!(search_kb)).routes(routes!(open_search))
}

pub fn qa_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(qa_stream))
        .routes(routes!(open_qa_stream))
}

/// Hybrid search: results with scores 0-1; `debug` adds stage timings.
#[utoipa::path(post, path = "/rag/search", tag = "knowledge", security(("svc_auth" = [])), request_body = SearchRequest,
    responses((status = 200, body = Envelope<SearchResponse>), (status = 400), (status = 401)))]
async fn search_kb(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<SearchRequest>,
) -> ApiResult<SearchResponse> {
    search::search(&state, &user, req).await.map(Api)
}

/// Search for external systems (same as /rag/search).
#[utoipa::path(post, path = "/open-api/rag/search", tag = "external", security(("svc_auth" = [])), request_body = SearchRequest,
    responses((status = 200, body = Envelope<SearchResponse>), (status = 400), (status = 401)))]
async fn open_search(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<SearchRequest>,
) -> ApiResult<SearchResponse> {
    search::search(&state, &user, req).await.map(Api)
}

/// Streamed answer: NDJSON lines `{"type":"text","data":..}`, then `{"type":"done","references":[..]}`,
/// or `{"type":"error","message":..}`.
#[utoipa::path(post, path = "/rag/qa/stream", tag = "knowledge", security(("svc_auth" = [])), request_body = QaRequest,
    responses((status = 200, content_type = "application/x-ndjson", body = QaEvent), (status = 400), (status = 401)))]
async fn qa_stream(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<QaRequest>,
) -> AppResult<Response> {
    let events = qa::answer(&state, &user, req).await?;
    event_stream::response("application/x-ndjson", events.map(|e| qa::ndjson(&e)))
}

/// The answer as raw text chunks, appended in order; a failure ends with a line
/// `[ERROR] message` (on a line of its own after any text).
#[utoipa::path(post, path = "/open-api/rag/qa/stream", tag = "external", security(("svc_auth" = [])), request_body = QaRequest,
    responses((status = 200, content_type = "text/plain", body = String), (status = 400), (status = 401)))]
async fn open_qa_stream(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<QaRequest>,
) -> AppResult<Response> {
    let events = qa::answer(&state, &user, req).await?;
    let text = events
        .scan(false, |texted, e| {
            let piece = match e {
                QaEvent::Text { data } => {
                    *texted |= !data.is_empty();
                    Some(data)
                }
                QaEvent::Error { message } if *texted => Some(format!("\n[ERROR] {message}\n")),
                QaEvent::Error { message } => Some(format!("[ERROR] {message}\n")),
                QaEvent::Done { .. } => None,
            };
            futures::future::ready(Some(piece))
        })
        .filter_map(futures::future::ready);
    event_stream::response("text/plain; charset=utf-8", text)
}
