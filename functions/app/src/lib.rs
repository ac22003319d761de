//! `/app`: apps (third-party client applications) and their client nodes. Administrators only.

use axum::extract::State;
use shared::apps::{service, AppFilter, AppInput, AppOption, AppView, ClientNode};
use shared::domain::DatetimeRange;
use shared::http::envelope::Empty;
use shared::http::{AdminUser, Api, ApiResult, Envelope, Json, Page, PageQuery, Path, Query};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(page))
        .routes(routes!(list))
        .routes(routes!(create))
        .routes(routes!(update, delete))
        .routes(routes!(toggle_status))
        .routes(routes!(reset_token))
        .routes(routes!(nodes))
        .routes(routes!(all_nodes))
        .routes(routes!(kick))
}

/// Apps, newest first, with their token and the number of online nodes.
#[utoipa::path(get, path = "/app/page", tag = "apps", security(("svc_auth" = [])),
    params(PageQuery, AppFilter, ("datetimeRange" = Option<Vec<String>>, Query, description = "created between two timestamps")),
    responses((status = 200, body = Envelope<Page<AppView>>), (status = 400), (status = 401), (status = 403)))]
async fn page(
    State(state): State<AppState>,
    _admin: AdminUser,
    Query(paging): Query<PageQuery>,
    Query(filter): Query<AppFilter>,
    range: DatetimeRange,
) -> ApiResult<Page<AppView>> {
    service::page(&state, paging, filter, range).await.map(Api)
}

/// Enabled apps, unpaged (for selection).
#[utoipa::path(get, path = "/app/list", tag = "apps", security(("svc_auth" = [])),
    responses((status = 200, body = Envelope<Vec<AppOption>>), (status = 401), (status = 403)))]
async fn list(State(state): State<AppState>, _admin: AdminUser) -> ApiResult<Vec<AppOption>> {
    service::list(&state).await.map(Api)
}

/// Create an app; the service generates its token (shown in the answer and in the page).
#[utoipa::path(post, path = "/app", tag = "apps", security(("svc_auth" = [])), request_body = AppInput,
    responses((status = 200, body = Envelope<AppView>), (status = 400), (status = 401), (status = 403)))]
async fn create(
    State(state): State<AppState>,
    AdminUser(user): AdminUser,
    Json(input): Json<AppInput>,
) -> ApiResult<AppView> {
    service::create(&state, &user, input).await.map(Api)
}

/// Change appName, description or routeStrategy (appId is fixed).
#[utoipa::path(put, path = "/app/{id}", tag = "apps", security(("svc_auth" = [])),
    params(("id" = i64, Path)), request_body = AppInput,
    responses((status = 200, body = Envelope<AppView>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn update(
    State(state): State<AppState>,
    _admin: AdminUser,
    Path(id): Path<i64>,
    Json(input): Json<AppInput>,
) -> ApiResult<AppView> {
    service::update(&state, id, input).await.map(Api)
}

/// Delete an app with its nodes and external users; refused while agents are bound to it.
#[utoipa::path(delete, path = "/app/{id}", tag = "apps", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn delete(State(state): State<AppState>, _admin: AdminUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::delete(&state, id).await?;
    Api::empty()
}

/// Give the app a new token (answered with the app): the old one, and the embed tokens signed
/// with it, stop working.
#[utoipa::path(post, path = "/app/{id}/token", tag = "apps", security(("svc_auth" = [])),
    params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<AppView>), (status = 401), (status = 403), (status = 404)))]
async fn reset_token(State(state): State<AppState>, _admin: AdminUser, Path(id): Path<i64>) -> ApiResult<AppView> {
    service::reset_token(&state, id).await.map(Api)
}

/// Flip the status between enabled (1) and disabled (0).
#[utoipa::path(post, path = "/app/{id}/toggle-status", tag = "apps", security(("svc_auth" = [])),
    params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn toggle_status(State(state): State<AppState>, _admin: AdminUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::toggle_status(&state, id).await?;
    Api::empty()
}

/// Client nodes of one app. The path parameter is the app's string identifier (appId).
#[utoipa::path(get, path = "/app/{id}/nodes", tag = "apps", security(("svc_auth" = [])),
    params(("id" = String, Path, description = "the appId string, not the numeric id")),
    responses((status = 200, body = Envelope<Vec<ClientNode>>), (status = 401), (status = 403), (status = 404)))]
async fn nodes(
    State(state): State<AppState>,
    _admin: AdminUser,
    Path(app_id): Path<String>,
) -> ApiResult<Vec<ClientNode>> {
    service::nodes(&state, &app_id).await.map(Api)
}

/// Client nodes of every app.
#[utoipa::path(get, path = "/app/all-nodes", tag = "apps", security(("svc_auth" = [])),
    responses((status = 200, body = Envelope<Vec<ClientNode>>), (status = 401), (status = 403)))]
async fn all_nodes(State(state): State<AppState>, _admin: AdminUser) -> ApiResult<Vec<ClientNode>> {
    service::all_nodes(&state).await.map(Api)
}

/// Kick a node: it is removed now and told so on its next heartbeat.
#[utoipa::path(delete, path = "/app/{id}/nodes/{hostId}", tag = "apps", security(("svc_auth" = [])),
    params(("id" = String, Path, description = "the appId string"), ("hostId" = String, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn kick(
    State(state): State<AppState>,
    _admin: AdminUser,
    Path((app_id, host_id)): Path<(String, String)>,
) -> ApiResult<Empty> {
    service::kick(&state, &app_id, &host_id).await?;
    Api::empty()
}
