//! Agents the app may use, and an external user's subscriptions.

use axum::extract::State;
use shared::domain::AppCaller;
use shared::external::{agents, AgentQuery, ExternalAgent, ExternalCaller, OpenIdQuery, SubscriptionRequest};
use shared::http::envelope::Empty;
use shared::http::{Api, ApiResult, Envelope, Json, Query};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(detail))
        .routes(routes!(subscribed))
        .routes(routes!(subscribe, unsubscribe))
}

/// Enabled agents that run on this app or on no app in particular, featured first, then the
/// most viewed; at most 200 (not paged).
#[utoipa::path(get, path = "/openapi/v1/agents", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    params(OpenIdQuery), responses((status = 200, body = Envelope<Vec<ExternalAgent>>), (status = 401)))]
async fn list(
    State(state): State<AppState>,
    app: AppCaller,
    Query(q): Query<OpenIdQuery>,
) -> ApiResult<Vec<ExternalAgent>> {
    agents::list(&state, &app, q).await.map(Api)
}

/// One agent; code 0 "agent does not exist or is disabled" when the app may not use it.
/// Also accepts an embed token (`Svc-Auth`), for the embed page.
#[utoipa::path(get, path = "/openapi/v1/agent", tag = "external",
    security(("svc_app_id" = [], "svc_token" = []), ("svc_auth" = [])),
    params(AgentQuery), responses((status = 200, body = Envelope<ExternalAgent>), (status = 400), (status = 401), (status = 403)))]
async fn detail(
    State(state): State<AppState>,
    caller: ExternalCaller,
    Query(mut q): Query<AgentQuery>,
) -> ApiResult<ExternalAgent> {
    q.open_id = caller.open_id(q.open_id.take())?;
    if let Some(id) = q.agent_id {
        caller.check_agent(id)?;
    }
    agents::detail(&state, &caller.app, q).await.map(Api)
}

/// Agents the external user subscribed to, by name; at most 200.
#[utoipa::path(get, path = "/openapi/v1/user/agents", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    params(OpenIdQuery), responses((status = 200, body = Envelope<Vec<ExternalAgent>>), (status = 400), (status = 401)))]
async fn subscribed(
    State(state): State<AppState>,
    app: AppCaller,
    Query(q): Query<OpenIdQuery>,
) -> ApiResult<Vec<ExternalAgent>> {
    agents::subscribed(&state, &app, q).await.map(Api)
}

/// Subscribe the external user to an agent (idempotent; registers the user on first contact).
#[utoipa::path(post, path = "/openapi/v1/user/agent", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    request_body = SubscriptionRequest, responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401)))]
async fn subscribe(
    State(state): State<AppState>,
    app: AppCaller,
    Json(req): Json<SubscriptionRequest>,
) -> ApiResult<Empty> {
    agents::subscribe(&state, &app, req, true).await?;
    Api::empty()
}

/// Unsubscribe (query agentId and openId; idempotent).
#[utoipa::path(delete, path = "/openapi/v1/user/agent", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    params(SubscriptionRequest), responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401)))]
async fn unsubscribe(
    State(state): State<AppState>,
    app: AppCaller,
    Query(req): Query<SubscriptionRequest>,
) -> ApiResult<Empty> {
    agents::subscribe(&state, &app, req, false).await?;
    Api::empty()
}
