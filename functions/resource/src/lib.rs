//! `/resource`: uploaded files (direct multipart upload, presigned upload, preview, download).

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use shared::domain::DatetimeRange;
use shared::domain::Disposition;
use shared::domain::UploadedFile;
use shared::http::envelope::Empty;
use shared::http::files::{file_response, FileRequest};
use shared::http::multipart::{read_form, Form, FormLimits, MultipartBody};
use shared::http::{Api, ApiResult, CurrentUser, Json, Page, PageQuery, Path, Query};
use shared::resources::{self, service, ResourceView};
use shared::{AppError, AppResult, AppState};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // Uploads enforce their own configured limits while streaming.
        .routes(routes!(upload))
        .routes(routes!(direct_upload))
        .layer(DefaultBodyLimit::disable())
        .routes(routes!(page))
        .routes(routes!(preview))
        .routes(routes!(download))
        .routes(routes!(delete))
        .routes(routes!(upload_url))
        .routes(routes!(complete_upload))
}

// The multipart form of an upload. The handler reads the body into it and the API document
// is generated from it, so the two cannot name different fields.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "camelCase")]
struct ResourceUploadForm {
    /// The file.
    #[schema(value_type = String, format = Binary, content_media_type = "application/octet-stream")]
    file: UploadedFile,
    /// Business type, e.g. avatar, document.
    biz_type: Option<String>,
    biz_id: Option<i64>,
}

impl ResourceUploadForm {
    fn read(mut form: Form) -> AppResult<Self> {
        let file = form
            .take_files("file")
            .into_iter()
            .next()
            .ok_or_else(|| AppError::validation("file is required"))?;
        Ok(Self {
            file,
            biz_type: form.text("bizType"),
            biz_id: form.number("bizId")?,
        })
    }
}

/// Upload a file (multipart). Files above MAX_UPLOAD_BYTES get 413: use /resource/upload-url.
#[utoipa::path(post, path = "/resource/upload", tag = "resources", security(("svc_auth" = [])),
    request_body(content = ResourceUploadForm, content_type = "multipart/form-data"),
    responses((status = 200, body = shared::http::Envelope<ResourceView>), (status = 400), (status = 401), (status = 413)))]
async fn upload(State(state): State<AppState>, user: CurrentUser, multipart: MultipartBody) -> ApiResult<ResourceView> {
    let form = read_form(multipart, FormLimits::one_file(state.config().max_upload_bytes)).await?;
    let ResourceUploadForm { file, biz_type, biz_id } = ResourceUploadForm::read(form)?;
    service::upload(&state, &user, file, biz_type, biz_id).await.map(Api)
}

/// Page through resources (your own; administrators see all).
#[utoipa::path(get, path = "/resource/page", tag = "resources", security(("svc_auth" = [])),
    params(PageQuery, resources::ResourceFilter,
        ("datetimeRange" = Option<Vec<String>>, Query, description = "creation time range: two timestamps `YYYY-MM-DD HH:mm:ss`")),
    responses((status = 200, body = shared::http::Envelope<Page<ResourceView>>), (status = 400), (status = 401)))]
async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(paging): Query<PageQuery>,
    Query(filter): Query<resources::ResourceFilter>,
    range: DatetimeRange,
) -> ApiResult<Page<ResourceView>> {
    service::page(&state, &user, paging, filter, range).await.map(Api)
}

/// The file inline, with its MIME type; supports Range requests. Your own files (administrators:
/// every uploaded file); anything else answers 404.
#[utoipa::path(get, path = "/resource/{id}/preview", tag = "resources", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, description = "the file's bytes"), (status = 206, description = "a byte range"),
              (status = 401), (status = 404), (status = 413, description = "more than one answer holds: ask for byte ranges"), (status = 416)))]
async fn preview(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    request: FileRequest,
) -> AppResult<Response> {
    let file = service::file(&state, &user, id).await?;
    file_response(&state, &file, &request, Disposition::Inline).await
}

/// The file as an attachment download; supports Range requests. Readable as for preview.
#[utoipa::path(get, path = "/resource/{id}/download", tag = "resources", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, description = "the file's bytes"), (status = 206, description = "a byte range"),
              (status = 401), (status = 404), (status = 413, description = "more than one answer holds: ask for byte ranges"), (status = 416)))]
async fn download(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    request: FileRequest,
) -> AppResult<Response> {
    let file = service::file(&state, &user, id).await?;
    file_response(&state, &file, &request, Disposition::Attachment).await
}

/// Delete a resource: its stored object and its record.
#[utoipa::path(delete, path = "/resource/{id}", tag = "resources", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 401), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::delete(&state, &user, id).await?;
    Api::empty()
}

/// A presigned PUT URL for files above the direct-upload limit.
#[utoipa::path(post, path = "/resource/upload-url", tag = "resources", security(("svc_auth" = [])),
    request_body = resources::UploadUrlRequest,
    responses((status = 200, body = shared::http::Envelope<resources::UploadUrlResult>), (status = 400), (status = 401), (status = 413)))]
async fn upload_url(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<resources::UploadUrlRequest>,
) -> ApiResult<resources::UploadUrlResult> {
    service::upload_url(&state, &user, req).await.map(Api)
}

/// Register a file sent through a presigned PUT.
#[utoipa::path(post, path = "/resource/upload/complete", tag = "resources", security(("svc_auth" = [])),
    request_body = resources::CompleteUploadRequest,
    responses((status = 200, body = shared::http::Envelope<ResourceView>), (status = 400), (status = 401), (status = 403), (status = 413)))]
async fn complete_upload(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<resources::CompleteUploadRequest>,
) -> ApiResult<ResourceView> {
    service::complete_upload(&state, &user, req).await.map(Api)
}

/// Target of presigned PUTs when files are stored on the local filesystem; authorised by the
/// URL's signature, not by a token.
#[utoipa::path(put, path = "/resource/direct-upload", tag = "resources", params(resources::DirectUploadQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = shared::http::Envelope<Empty>), (status = 403), (status = 413)))]
async fn direct_upload(
    State(state): State<AppState>,
    Query(q): Query<resources::DirectUploadQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Empty> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream");
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    service::direct_upload(&state, q, content_type, declared, body.into_data_stream()).await?;
    Api::empty()
}
