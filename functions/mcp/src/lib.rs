//! `/mcp-server`: MCP tool servers (management, connection test, tool lists).

use axum::extract::State;
use shared::http::envelope::Empty;
use shared::http::{Api, ApiResult, CurrentUser, Json, Page, PageQuery, Path, Query};
use shared::mcp::{self, service};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(page))
        .routes(routes!(list))
        .routes(routes!(create))
        .routes(routes!(get, update, delete))
        .routes(routes!(test))
        .routes(routes!(tools))
}

/// Page through MCP servers: your own and administrators' ones (administrators see all).
#[utoipa::path(get, path = "/mcp-server/page", tag = "mcp", security(("svc_auth" = [])),
    params(PageQuery, mcp::McpFilter),
    responses((status = 200, body = shared::http::Envelope<Page<mcp::McpServerView>>), (status = 401)))]
async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(paging): Query<PageQuery>,
    Query(filter): Query<mcp::McpFilter>,
) -> ApiResult<Page<mcp::McpServerView>> {
    service::page(&state, &user, paging, filter).await.map(Api)
}

/// `{id, name}` of every MCP server you may use, for selection lists.
#[utoipa::path(get, path = "/mcp-server/list", tag = "mcp", security(("svc_auth" = [])),
    responses((status = 200, body = shared::http::Envelope<Vec<mcp::McpOption>>), (status = 401)))]
async fn list(State(state): State<AppState>, user: CurrentUser) -> ApiResult<Vec<mcp::McpOption>> {
    service::options(&state, &user).await.map(Api)
}

/// One MCP server; secrets in authConfig and envVars are masked.
#[utoipa::path(get, path = "/mcp-server/{id}", tag = "mcp", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = shared::http::Envelope<mcp::McpServerView>), (status = 401), (status = 404)))]
async fn get(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<mcp::McpServerView> {
    service::get(&state, &user, id).await.map(Api)
}

/// Create an MCP server; returns its id. stdio servers (transportType 3) are for administrators.
#[utoipa::path(post, path = "/mcp-server", tag = "mcp", security(("svc_auth" = [])),
    request_body = mcp::McpServerRequest,
    responses((status = 200, body = shared::http::Envelope<i64>), (status = 400), (status = 401), (status = 403)))]
async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<mcp::McpServerRequest>,
) -> ApiResult<i64> {
    service::create(&state, &user, req).await.map(Api)
}

/// Change an MCP server (fields sent replace the stored ones; a masked secret keeps the stored
/// one). The status returns to `unknown` until the next test.
#[utoipa::path(put, path = "/mcp-server/{id}", tag = "mcp", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = mcp::McpServerRequest,
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<mcp::McpServerRequest>,
) -> ApiResult<Empty> {
    service::update(&state, &user, id, req).await?;
    Api::empty()
}

/// Delete an MCP server; agents that used it no longer list it.
#[utoipa::path(delete, path = "/mcp-server/{id}", tag = "mcp", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::delete(&state, &user, id).await?;
    Api::empty()
}

/// Connect, list the tools and record the outcome as the server's status (`connected` or
/// `error` with lastError). A failed connection is `success: false`, not an error response.
#[utoipa::path(post, path = "/mcp-server/{id}/test", tag = "mcp", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = shared::http::Envelope<mcp::McpTestResult>), (status = 401), (status = 403), (status = 404)))]
async fn test(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<mcp::McpTestResult> {
    service::test(&state, &user, id).await.map(Api)
}

/// The server's tools (cached for MCP_TOOLS_TTL_SECS); code 0 with the reason when unreachable.
#[utoipa::path(get, path = "/mcp-server/{id}/tools", tag = "mcp", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = shared::http::Envelope<Vec<mcp::ToolView>>), (status = 400), (status = 401), (status = 404)))]
async fn tools(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Vec<mcp::ToolView>> {
    service::tools(&state, &user, id).await.map(Api)
}
