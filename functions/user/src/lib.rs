//! `/user` and `/auth`: login, token refresh, the current user and user administration.

use axum::extract::State;
use serde::Deserialize;
use shared::http::client_ip::ClientIp;
use shared::http::envelope::Empty;
use shared::http::{AdminUser, Api, ApiResult, CurrentUser, Json, Page, PageQuery, Path, Query};
use shared::users::{self, service};
use shared::AppState;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(login))
        .routes(routes!(refresh_token))
        .routes(routes!(current_user, create_user))
        .routes(routes!(list_users))
        .routes(routes!(update_user))
        .routes(routes!(set_role))
        .routes(routes!(reset_password))
        .routes(routes!(change_own_password))
        .routes(routes!(authorize_code))
}

/// Log in with username and password.
#[utoipa::path(post, path = "/user/login", tag = "users", request_body = users::LoginRequest,
    responses((status = 200, body = shared::http::Envelope<users::LoginResult>),
              (status = 401, description = "wrong username or password"),
              (status = 429, description = "too many failed logins")))]
async fn login(
    State(state): State<AppState>,
    ip: ClientIp,
    Json(req): Json<users::LoginRequest>,
) -> ApiResult<users::LoginResult> {
    service::login(&state, req, &ip.0).await.map(Api)
}

/// Exchange a refresh token for a new token pair (the old refresh token stops working).
#[utoipa::path(post, path = "/auth/refreshToken", tag = "users", request_body = users::RefreshRequest,
    responses((status = 200, body = shared::http::Envelope<users::TokenPair>), (status = 401)))]
async fn refresh_token(
    State(state): State<AppState>,
    Json(req): Json<users::RefreshRequest>,
) -> ApiResult<users::TokenPair> {
    service::refresh(&state, req).await.map(Api)
}

/// The signed-in user.
#[utoipa::path(get, path = "/user", tag = "users", security(("svc_auth" = [])),
    responses((status = 200, body = shared::http::Envelope<users::UserView>), (status = 401)))]
async fn current_user(State(state): State<AppState>, user: CurrentUser) -> ApiResult<users::UserView> {
    service::current(&state, &user).await.map(Api)
}

/// Create a user (administrator).
#[utoipa::path(post, path = "/user", tag = "users", security(("svc_auth" = [])), request_body = users::CreateUserRequest,
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 400), (status = 401), (status = 403)))]
async fn create_user(
    State(state): State<AppState>,
    _admin: AdminUser,
    Json(req): Json<users::CreateUserRequest>,
) -> ApiResult<Empty> {
    service::create(&state, req).await?;
    Api::empty()
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct UserFilter {
    /// Substring of the email address.
    email: Option<String>,
}

/// Page through users (administrator).
#[utoipa::path(get, path = "/user/page/list", tag = "users", security(("svc_auth" = [])), params(PageQuery, UserFilter),
    responses((status = 200, body = shared::http::Envelope<Page<users::UserView>>), (status = 401), (status = 403)))]
async fn list_users(
    State(state): State<AppState>,
    _admin: AdminUser,
    Query(page): Query<PageQuery>,
    Query(filter): Query<UserFilter>,
) -> ApiResult<Page<users::UserView>> {
    service::page(&state, page, filter.email).await.map(Api)
}

/// Update a user's role, email and optionally password (administrator).
#[utoipa::path(put, path = "/user/{id}", tag = "users", security(("svc_auth" = [])), request_body = users::UpdateUserRequest,
    params(("id" = i64, Path)),
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn update_user(
    State(state): State<AppState>,
    _admin: AdminUser,
    Path(id): Path<i64>,
    Json(req): Json<users::UpdateUserRequest>,
) -> ApiResult<Empty> {
    service::update(&state, id, req).await?;
    Api::empty()
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RoleQuery {
    /// 1 = administrator, 2 = regular user.
    role: Option<i64>,
}

/// Change a user's role (administrator).
#[utoipa::path(put, path = "/user/{id}/role", tag = "users", security(("svc_auth" = [])), params(("id" = i64, Path), RoleQuery),
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn set_role(
    State(state): State<AppState>,
    _admin: AdminUser,
    Path(id): Path<i64>,
    Query(q): Query<RoleQuery>,
) -> ApiResult<Empty> {
    service::set_role(&state, id, q.role).await?;
    Api::empty()
}

/// Reset a user's password (administrator); the user's refresh tokens are revoked.
#[utoipa::path(put, path = "/user/{id}/password", tag = "users", security(("svc_auth" = [])), request_body = users::PasswordRequest,
    params(("id" = i64, Path)),
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn reset_password(
    State(state): State<AppState>,
    _admin: AdminUser,
    Path(id): Path<i64>,
    Json(req): Json<users::PasswordRequest>,
) -> ApiResult<Empty> {
    service::reset_password(&state, id, req).await?;
    Api::empty()
}

/// Change the signed-in user's own password.
#[utoipa::path(put, path = "/user/password", tag = "users", security(("svc_auth" = [])), request_body = users::ChangePasswordRequest,
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 400), (status = 401)))]
async fn change_own_password(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<users::ChangePasswordRequest>,
) -> ApiResult<Empty> {
    service::change_own_password(&state, &user, req).await?;
    Api::empty()
}

/// Grant a token quota valid for some days to the user with an email (administrator);
/// creates a regular user for an unknown email.
#[utoipa::path(post, path = "/user/authorize/code", tag = "users", security(("svc_auth" = [])),
    request_body = users::AuthorizeCodeRequest,
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 400), (status = 401), (status = 403)))]
async fn authorize_code(
    State(state): State<AppState>,
    _admin: AdminUser,
    Json(req): Json<users::AuthorizeCodeRequest>,
) -> ApiResult<Empty> {
    service::authorize_code(&state, req).await?;
    Api::empty()
}
