//! Chat images: as base64 JSON, or through a presigned PUT for those a request body on Lambda
//! cannot carry.

use axum::extract::{DefaultBodyLimit, State};
use shared::domain::AppCaller;
use shared::external::upload::{self, MAX_BODY_BYTES};
use shared::external::{CompleteImageUploadRequest, ImageUploadUrlRequest, UploadRequest, UploadedImage};
use shared::http::{Api, ApiResult, Envelope, Json};
use shared::resources::UploadUrlResult;
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(upload))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .routes(routes!(upload_url))
        .routes(routes!(complete_upload))
}

/// Upload a chat image (JPG, PNG or WEBP, at most 10 MB; fileSize must match the content).
/// Deployed on AWS, a request body is capped near 6 MB: larger images go through `upload-url`.
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

/// A presigned PUT for a chat image (JPG, PNG or WEBP, at most 10 MB): send the bytes to
/// `uploadUrl` with every listed header within 15 minutes, then register them with
/// `upload/complete`.
#[utoipa::path(post, path = "/openapi/v1/resource/upload-url", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    request_body = ImageUploadUrlRequest,
    responses((status = 200, body = Envelope<UploadUrlResult>), (status = 400), (status = 401)))]
async fn upload_url(
    State(state): State<AppState>,
    app: AppCaller,
    Json(req): Json<ImageUploadUrlRequest>,
) -> ApiResult<UploadUrlResult> {
    upload::upload_url(&state, &app, req).await.map(Api)
}

/// Registers an image sent to a presigned URL as the external user's; the answer's
/// `resourceId` goes into the chat's attachments.
#[utoipa::path(post, path = "/openapi/v1/resource/upload/complete", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    request_body = CompleteImageUploadRequest,
    responses((status = 200, body = Envelope<UploadedImage>), (status = 400), (status = 401), (status = 403), (status = 413)))]
async fn complete_upload(
    State(state): State<AppState>,
    app: AppCaller,
    Json(req): Json<CompleteImageUploadRequest>,
) -> ApiResult<UploadedImage> {
    upload::complete_upload(&state, &app, req).await.map(Api)
}
