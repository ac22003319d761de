//! External users: register or sync, and read.

use axum::extract::State;
use shared::domain::AppCaller;
use shared::external::{users, ExternalUserView, OpenIdQuery, RegisterRequest};
use shared::http::{Api, ApiResult, Envelope, Json, Query};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(register)).routes(routes!(info))
}

/// Register the user, or update the fields sent (nickname, avatar, extra).
#[utoipa::path(post, path = "/openapi/v1/user/register", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    request_body = RegisterRequest, responses((status = 200, body = Envelope<ExternalUserView>), (status = 400), (status = 401)))]
async fn register(
    State(state): State<AppState>,
    app: AppCaller,
    Json(req): Json<RegisterRequest>,
) -> ApiResult<ExternalUserView> {
    users::register(&state, &app, req).await.map(Api)
}

/// The registered user with this openId (404 when unknown).
#[utoipa::path(get, path = "/openapi/v1/user", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    params(OpenIdQuery), responses((status = 200, body = Envelope<ExternalUserView>), (status = 400), (status = 401), (status = 404)))]
async fn info(
    State(state): State<AppState>,
    app: AppCaller,
    Query(q): Query<OpenIdQuery>,
) -> ApiResult<ExternalUserView> {
    users::info(&state, &app, q.open_id).await.map(Api)
}
