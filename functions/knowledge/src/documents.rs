//! `/document`: upload with dedup, import by URL, files, images, reprocessing.

use axum::extract::{DefaultBodyLimit, State};
use axum::response::Response;
use shared::domain::Disposition;
use shared::domain::UploadedFile;
use shared::http::envelope::Empty;
use shared::http::files::{file_response, FileRequest};
use shared::http::multipart::{read_form, Form, FormLimits, MultipartBody};
use shared::http::{Api, ApiResult, CurrentUser, Envelope, Json, Page, PageQuery, Path, Query};
use shared::rag::documents::upload::{self, PreviewOptions};
use shared::rag::documents::{self as docs, service, DocFilter, DocImageView, DocView};
use shared::{AppError, AppResult, AppState};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // The upload checks its own per-file limit while streaming.
        .routes(routes!(preview_upload))
        .layer(DefaultBodyLimit::disable())
        .routes(routes!(page))
        .routes(routes!(get, delete))
        .routes(routes!(preview_resources))
        .routes(routes!(commit_upload))
        .routes(routes!(cancel_upload))
        .routes(routes!(import_url))
        .routes(routes!(reprocess))
        .routes(routes!(preview_file))
        .routes(routes!(download_file))
        .routes(routes!(images))
        .routes(routes!(image))
}

#[utoipa::path(get, path = "/document/page", tag = "knowledge", security(("svc_auth" = [])), params(DocFilter, PageQuery),
    responses((status = 200, body = Envelope<Page<DocView>>), (status = 401), (status = 404)))]
async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(f): Query<DocFilter>,
    Query(p): Query<PageQuery>,
) -> ApiResult<Page<DocView>> {
    service::page(&state, &user, f.rag_id, p).await.map(Api)
}

/// A document with its status, progress, per-stage timings and failure reason.
#[utoipa::path(get, path = "/document/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<DocView>), (status = 401), (status = 404)))]
async fn get(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<DocView> {
    service::get(&state, &user, id).await.map(Api)
}

// The multipart form of an upload preview. The handler reads the body into it and the API
// document is generated from it, so the two cannot name different fields.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "camelCase")]
struct PreviewForm {
    rag_id: i64,
    /// One or more files (pdf, docx, xlsx, csv, md, txt, html); `file` is read as well.
    #[schema(value_type = Vec<String>, format = Binary)]
    files: Vec<UploadedFile>,
    /// 0 none, 1 by name, 2 by content, 3 by name or content (default: the base's).
    dedup_strategy: Option<i64>,
    /// 0 reject, 1 skip, 2 overwrite (default: the base's).
    dedup_action: Option<i64>,
}

impl PreviewForm {
    fn read(mut form: Form) -> AppResult<Self> {
        let rag_id = form
            .number("ragId")?
            .ok_or_else(|| AppError::validation("ragId is required"))?;
        let mut files = form.take_files("files");
        files.extend(form.take_files("file"));
        Ok(Self {
            rag_id,
            files,
            dedup_strategy: form.number("dedupStrategy")?,
            dedup_action: form.number("dedupAction")?,
        })
    }
}

/// Step one of an upload: store the files as temporary resources and report, per file, what
/// committing would do.
#[utoipa::path(post, path = "/document/upload/preview", tag = "knowledge", security(("svc_auth" = [])),
    request_body(content = PreviewForm, content_type = "multipart/form-data"),
    responses((status = 200, body = Envelope<docs::PreviewResult>), (status = 400), (status = 401), (status = 404), (status = 413)))]
async fn preview_upload(
    State(state): State<AppState>,
    user: CurrentUser,
    multipart: MultipartBody,
) -> ApiResult<docs::PreviewResult> {
    let form = read_form(
        multipart,
        FormLimits {
            max_file_bytes: state.config().max_upload_bytes,
            max_files: upload::MAX_FILES,
        },
    )
    .await?;
    let PreviewForm {
        rag_id,
        files,
        dedup_strategy,
        dedup_action,
    } = PreviewForm::read(form)?;
    let options = PreviewOptions {
        dedup_strategy,
        dedup_action,
    };
    upload::preview(&state, &user, rag_id, files, options).await.map(Api)
}

/// Step one for files already uploaded as resources (`bizType` document, through a presigned
/// PUT for files larger than an API Gateway request): the same preview, the files moved into it.
#[utoipa::path(post, path = "/document/upload/preview-from-resources", tag = "knowledge", security(("svc_auth" = [])),
    request_body = docs::PreviewResourcesRequest,
    responses((status = 200, body = Envelope<docs::PreviewResult>), (status = 400), (status = 401), (status = 404), (status = 413)))]
async fn preview_resources(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<docs::PreviewResourcesRequest>,
) -> ApiResult<docs::PreviewResult> {
    upload::preview_resources(&state, &user, req).await.map(Api)
}

/// Step two: create documents for the NEW and OVERWRITE items and queue them for processing.
#[utoipa::path(post, path = "/document/upload/commit", tag = "knowledge", security(("svc_auth" = [])),
    request_body = docs::CommitRequest,
    responses((status = 200, body = Envelope<docs::CommitResult>), (status = 400), (status = 401), (status = 404)))]
async fn commit_upload(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<docs::CommitRequest>,
) -> ApiResult<docs::CommitResult> {
    upload::commit(&state, &user, req).await.map(Api)
}

/// Abandon a preview: its temporary files are deleted.
#[utoipa::path(delete, path = "/document/upload/preview/{token}", tag = "knowledge", security(("svc_auth" = [])),
    params(("token" = String, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 404)))]
async fn cancel_upload(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(token): Path<String>,
) -> ApiResult<Empty> {
    upload::cancel(&state, &user, &token).await?;
    Api::empty()
}

/// Fetch a document from a public URL (internal addresses are refused).
#[utoipa::path(post, path = "/document/import/url", tag = "knowledge", security(("svc_auth" = [])),
    request_body = docs::ImportUrlRequest,
    responses((status = 200, body = Envelope<docs::Imported>), (status = 400), (status = 401), (status = 404), (status = 413)))]
async fn import_url(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<docs::ImportUrlRequest>,
) -> ApiResult<docs::Imported> {
    service::import_url(&state, &user, req).await.map(Api)
}

/// Send the document through the pipeline again.
#[utoipa::path(post, path = "/document/{id}/reprocess", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<DocView>), (status = 401), (status = 404)))]
async fn reprocess(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<DocView> {
    service::reprocess(&state, &user, id).await.map(Api)
}

/// The original file inline, with its MIME type.
#[utoipa::path(get, path = "/document/{id}/preview", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, description = "the file"), (status = 206), (status = 401), (status = 404), (status = 413, description = "more than one answer holds: ask for byte ranges"), (status = 416)))]
async fn preview_file(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    request: FileRequest,
) -> AppResult<Response> {
    let file = service::file(&state, &user, id).await?;
    file_response(&state, &file, &request, Disposition::Inline).await
}

/// The original file as an attachment.
#[utoipa::path(get, path = "/document/{id}/download", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, description = "the file"), (status = 206), (status = 401), (status = 404), (status = 413, description = "more than one answer holds: ask for byte ranges"), (status = 416)))]
async fn download_file(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    request: FileRequest,
) -> AppResult<Response> {
    let file = service::file(&state, &user, id).await?;
    file_response(&state, &file, &request, Disposition::Attachment).await
}

/// Images saved from the document by the parser.
#[utoipa::path(get, path = "/document/{id}/images", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Vec<DocImageView>>), (status = 401), (status = 404)))]
async fn images(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Vec<DocImageView>> {
    service::images(&state, &user, id).await.map(Api)
}

/// The bytes of one document image (its `imageUrl`).
#[utoipa::path(get, path = "/document/image/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, description = "the image"), (status = 206), (status = 401), (status = 404),
        (status = 413, description = "more than one answer holds: ask for byte ranges"), (status = 416)))]
async fn image(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    request: FileRequest,
) -> AppResult<Response> {
    let image = service::image(&state, &user, id).await?;
    file_response(&state, &image, &request, Disposition::Inline).await
}

/// Delete a document with its chunks, vectors, images and file.
#[utoipa::path(delete, path = "/document/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::delete(&state, &user, id).await?;
    Api::empty()
}
