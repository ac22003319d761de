//! Chat images as base64 JSON.

use axum::extract::{DefaultBodyLimit, State};
use shared::domain::AppCaller;
use shared::external::upload::{self, MAX_BODY_BYTES};
use shared::external::{UploadRequest, UploadedImage};
use shared::http::{Api, ApiResult, Envelope, Json};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(upload))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// Upload a chat image (JPG, PNG or WEBP, at most 10 MB; fileSize must match the content).
#[utoipa::path(post, path = "/openapi/v1/resource/upload", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    request_body = UploadRequest,
    responses((status = 200, body = Envelope<UploadedImage>), (status = 400), (status = 401), (status = 413)))]
async fn upload(
    State(state): State<AppState>,
    app: AppCaller,
    Json(req): Json<UploadRequest>,
) -> ApiResult<UploadedImage> {
    upload::upload(&state, &app, req).await.map(Api)
}
