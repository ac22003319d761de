//! Agent management, the market and subscriptions.

use axum::extract::State;
use shared::agents::{service, AgentFields, AgentFilter, AgentView, ChatModelOption, MarketAgent};
use shared::http::envelope::Empty;
use shared::http::{Api, ApiResult, CurrentUser, Envelope, Json, Page, PageQuery, Path, Query};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(page))
        .routes(routes!(create))
        .routes(routes!(detail, update, delete))
        .routes(routes!(market))
        .routes(routes!(mine))
        .routes(routes!(subscribe, unsubscribe))
        .routes(routes!(chat_models))
}

/// Agents you can see (administrators: all; others: enabled ones and their own).
#[utoipa::path(get, path = "/agent/page", tag = "agents", security(("svc_auth" = [])), params(PageQuery, AgentFilter),
    responses((status = 200, body = Envelope<Page<AgentView>>), (status = 400), (status = 401)))]
async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(paging): Query<PageQuery>,
    Query(filter): Query<AgentFilter>,
) -> ApiResult<Page<AgentView>> {
    service::page(&state, &user, paging, filter).await.map(Api)
}

/// Create an agent from its fields (`name` required); answers its id.
#[utoipa::path(post, path = "/agent", tag = "agents", security(("svc_auth" = [])), request_body = AgentFields,
    responses((status = 200, body = Envelope<i64>), (status = 400), (status = 401), (status = 403)))]
async fn create(State(state): State<AppState>, user: CurrentUser, Json(req): Json<AgentFields>) -> ApiResult<i64> {
    service::create(&state, &user, req).await.map(Api)
}

/// An agent with its MCP servers and skills; counts a view.
#[utoipa::path(get, path = "/agent/{id}", tag = "agents", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<AgentView>), (status = 401), (status = 404)))]
async fn detail(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<AgentView> {
    service::detail(&state, &user, id).await.map(Api)
}

/// Change an agent (its creator or an administrator); absent fields are kept.
#[utoipa::path(put, path = "/agent/{id}", tag = "agents", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = AgentFields,
    responses((status = 200, body = Envelope<AgentView>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<AgentFields>,
) -> ApiResult<AgentView> {
    service::update(&state, &user, id, req).await.map(Api)
}

/// Delete an agent with its conversations and messages.
#[utoipa::path(delete, path = "/agent/{id}", tag = "agents", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::delete(&state, &user, id).await?;
    Api::empty()
}

/// Every enabled agent, featured first, then the most viewed.
#[utoipa::path(get, path = "/agent/market", tag = "agents", security(("svc_auth" = [])),
    responses((status = 200, body = Envelope<Vec<MarketAgent>>), (status = 401)))]
async fn market(State(state): State<AppState>, user: CurrentUser) -> ApiResult<Vec<MarketAgent>> {
    service::market(&state, &user).await.map(Api)
}

/// Agents you created or subscribed to.
#[utoipa::path(get, path = "/agent/my", tag = "agents", security(("svc_auth" = [])),
    responses((status = 200, body = Envelope<Vec<AgentView>>), (status = 401)))]
async fn mine(State(state): State<AppState>, user: CurrentUser) -> ApiResult<Vec<AgentView>> {
    service::mine(&state, &user).await.map(Api)
}

/// Subscribe to an enabled agent (idempotent).
#[utoipa::path(post, path = "/agent/{id}/subscribe", tag = "agents", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 404)))]
async fn subscribe(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::subscribe(&state, &user, id, true).await?;
    Api::empty()
}

/// Unsubscribe (idempotent).
#[utoipa::path(delete, path = "/agent/{id}/subscribe", tag = "agents", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 404)))]
async fn unsubscribe(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::subscribe(&state, &user, id, false).await?;
    Api::empty()
}

/// Enabled CHAT models you can use, with their capabilities.
#[utoipa::path(get, path = "/agent/chat-models", tag = "agents", security(("svc_auth" = [])),
    responses((status = 200, body = Envelope<Vec<ChatModelOption>>), (status = 401)))]
async fn chat_models(State(state): State<AppState>, user: CurrentUser) -> ApiResult<Vec<ChatModelOption>> {
    service::chat_models(&state, &user).await.map(Api)
}
