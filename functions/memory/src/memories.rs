//! Memories: lists, search, detail, edits, state changes, extraction, stats, context preview.

use axum::extract::State;
use shared::http::envelope::Empty;
use shared::http::{Api, ApiResult, CurrentUser, Envelope, Json, Path, Query};
use shared::memory::{self, context, service, Transition};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(by_conversation))
        .routes(routes!(by_agent))
        .routes(routes!(recent))
        .routes(routes!(search))
        .routes(routes!(detail, update, delete))
        .routes(routes!(archive))
        .routes(routes!(suppress))
        .routes(routes!(activate))
        .routes(routes!(extract))
        .routes(routes!(stats))
        .routes(routes!(context_preview))
}

/// Memories extracted from one of your conversations (client conversation id), newest first;
/// `agentId` keeps one agent's, as two agents' conversations may share an id.
#[utoipa::path(get, path = "/memory/conversation/{conversationId}", tag = "memory", security(("svc_auth" = [])),
    params(("conversationId" = String, Path), memory::ConversationMemoriesQuery),
    responses((status = 200, body = Envelope<Vec<memory::MemoryView>>), (status = 400), (status = 401)))]
async fn by_conversation(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(key): Path<String>,
    Query(q): Query<memory::ConversationMemoriesQuery>,
) -> ApiResult<Vec<memory::MemoryView>> {
    service::by_conversation(&state, &user, key, q).await.map(Api)
}

/// Memories of an agent (yours; administrators see everyone's), newest first.
#[utoipa::path(get, path = "/memory/agent/{agentId}", tag = "memory", security(("svc_auth" = [])),
    params(("agentId" = i64, Path), memory::AgentMemoriesQuery),
    responses((status = 200, body = Envelope<Vec<memory::MemoryView>>), (status = 400), (status = 401)))]
async fn by_agent(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(agent_id): Path<i64>,
    Query(q): Query<memory::AgentMemoriesQuery>,
) -> ApiResult<Vec<memory::MemoryView>> {
    service::by_agent(&state, &user, agent_id, q).await.map(Api)
}

/// Memories of an agent created in the last `days` days.
#[utoipa::path(get, path = "/memory/agent/{agentId}/recent", tag = "memory", security(("svc_auth" = [])),
    params(("agentId" = i64, Path), memory::RecentQuery),
    responses((status = 200, body = Envelope<Vec<memory::MemoryView>>), (status = 400), (status = 401)))]
async fn recent(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(agent_id): Path<i64>,
    Query(q): Query<memory::RecentQuery>,
) -> ApiResult<Vec<memory::MemoryView>> {
    service::recent(&state, &user, agent_id, q).await.map(Api)
}

/// Semantic and full-text search over your memories (every status).
#[utoipa::path(post, path = "/memory/search", tag = "memory", security(("svc_auth" = [])),
    request_body = memory::SearchRequest,
    responses((status = 200, body = Envelope<Vec<memory::MemoryHit>>), (status = 400), (status = 401)))]
async fn search(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<memory::SearchRequest>,
) -> ApiResult<Vec<memory::MemoryHit>> {
    service::search(&state, &user, req).await.map(Api)
}

#[utoipa::path(get, path = "/memory/{memoryId}", tag = "memory", security(("svc_auth" = [])),
    params(("memoryId" = i64, Path)),
    responses((status = 200, body = Envelope<memory::MemoryView>), (status = 401), (status = 404)))]
async fn detail(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
) -> ApiResult<memory::MemoryView> {
    service::detail(&state, &user, id).await.map(Api)
}

/// Edit a memory; changed text is embedded again; `status` is set as given.
#[utoipa::path(put, path = "/memory/{memoryId}", tag = "memory", security(("svc_auth" = [])),
    params(("memoryId" = i64, Path)), request_body = memory::UpdateRequest,
    responses((status = 200, body = Envelope<memory::MemoryView>), (status = 400), (status = 401), (status = 404)))]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<memory::UpdateRequest>,
) -> ApiResult<memory::MemoryView> {
    service::update(&state, &user, id, req).await.map(Api)
}

#[utoipa::path(delete, path = "/memory/{memoryId}", tag = "memory", security(("svc_auth" = [])),
    params(("memoryId" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::delete(&state, &user, id).await?;
    Api::empty()
}

/// ACTIVE -> ARCHIVED; any other state is refused.
#[utoipa::path(post, path = "/memory/{memoryId}/archive", tag = "memory", security(("svc_auth" = [])),
    params(("memoryId" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 404)))]
async fn archive(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::transition(&state, &user, id, Transition::Archive).await?;
    Api::empty()
}

/// ACTIVE -> SUPPRESSED: never recalled proactively again; any other state is refused.
#[utoipa::path(post, path = "/memory/{memoryId}/suppress", tag = "memory", security(("svc_auth" = [])),
    params(("memoryId" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 404)))]
async fn suppress(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::transition(&state, &user, id, Transition::Suppress).await?;
    Api::empty()
}

/// ARCHIVED or SUPPRESSED -> ACTIVE; an ACTIVE memory is refused.
#[utoipa::path(post, path = "/memory/{memoryId}/activate", tag = "memory", security(("svc_auth" = [])),
    params(("memoryId" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 404)))]
async fn activate(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::transition(&state, &user, id, Transition::Activate).await?;
    Api::empty()
}

/// Extract memories from your conversation now (synchronously); only messages added since the
/// last extraction are read.
#[utoipa::path(post, path = "/memory/agent/{agentId}/conversations/{conversationId}/extract", tag = "memory",
    security(("svc_auth" = [])), params(("agentId" = i64, Path), ("conversationId" = String, Path)),
    responses((status = 200, body = Envelope<memory::ExtractResult>), (status = 400), (status = 401), (status = 404)))]
async fn extract(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((agent_id, key)): Path<(i64, String)>,
) -> ApiResult<memory::ExtractResult> {
    service::extract_now(&state, &user, agent_id, key).await.map(Api)
}

/// Counts, most recalled memories and retrieval effectiveness over the last `days` days.
#[utoipa::path(get, path = "/memory/agent/{agentId}/stats", tag = "memory", security(("svc_auth" = [])),
    params(("agentId" = i64, Path), memory::StatsQuery),
    responses((status = 200, body = Envelope<memory::Stats>), (status = 400), (status = 401)))]
async fn stats(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(agent_id): Path<i64>,
    Query(q): Query<memory::StatsQuery>,
) -> ApiResult<memory::Stats> {
    service::stats(&state, &user, agent_id, q).await.map(Api)
}

/// The context the next turn of your conversation would send: messages, memories, tokens.
#[utoipa::path(get, path = "/memory/agent/{agentId}/conversations/{conversationId}/context-preview", tag = "memory",
    security(("svc_auth" = [])), params(("agentId" = i64, Path), ("conversationId" = String, Path)),
    responses((status = 200, body = Envelope<memory::ContextPreview>), (status = 401), (status = 404)))]
async fn context_preview(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((agent_id, key)): Path<(i64, String)>,
) -> ApiResult<memory::ContextPreview> {
    context::preview(&state, &user, agent_id, key).await.map(Api)
}
