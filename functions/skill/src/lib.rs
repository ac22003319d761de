//! `/skill`: skill packages (zip with `SKILL.md`), online file editing and AI drafts.
//! Answers in the `{status, message, data}` envelope; lists page with `page`/`size`.
//! Any logged-in user may read skills; only the creator or an administrator may change them.
//! A change based on an outdated `version` (or racing another change) is refused with HTTP 409.

use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use shared::domain::Disposition;
use shared::domain::UploadedFile;
use shared::http::envelope::{Empty, StatusApi, StatusEnvelope, StatusPage, StatusPageEnvelope, StatusResult};
use shared::http::files::content_disposition;
use shared::http::multipart::{read_form, Form, FormLimits, MultipartBody};
use shared::http::{CurrentUser, Json, PageQuery, Path, Query};
use shared::skills::{self as s, drafts, files, service};
use shared::{AppResult, AppState};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The largest request body a file write (or an optimize of a file's `currentContent`) takes: a
/// file of SKILL_MAX_FILE_BYTES (1 MiB by default) sent as JSON text, where an escape may take six bytes (`\u001b`) and an emoji
/// twelve as a surrogate pair, for four in the file. Under the default 2 MiB a file well under
/// its limit could be read online and not written back. The file's own limit is checked after.
const FILE_WRITE_BODY_BYTES: usize = 7 << 20;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // The layer closest to a route sets its limit: the upload's below does not lift this.
        .routes(routes!(read_file, write_file))
        .routes(routes!(optimize))
        .layer(DefaultBodyLimit::max(FILE_WRITE_BODY_BYTES))
        // The upload enforces SKILL_MAX_PACKAGE_BYTES itself while reading.
        .routes(routes!(upload))
        .routes(routes!(replace))
        .layer(DefaultBodyLimit::disable())
        .routes(routes!(page))
        .routes(routes!(list))
        .routes(routes!(create))
        .routes(routes!(detail, update, delete))
        .routes(routes!(download))
        .routes(routes!(generate))
        .routes(routes!(tree, create_entry, delete_entry))
        .routes(routes!(rename))
}

type Env<T> = StatusEnvelope<T>;

/// Page through skills; `keyword` matches name or description.
#[utoipa::path(get, path = "/skill/page", tag = "skills", security(("svc_auth" = [])), params(PageQuery, s::SkillFilter),
    responses((status = 200, body = StatusPageEnvelope<s::Skill>), (status = 401)))]
async fn page(
    State(state): State<AppState>,
    _user: CurrentUser,
    Query(paging): Query<PageQuery>,
    Query(filter): Query<s::SkillFilter>,
) -> AppResult<StatusPage<s::Skill>> {
    service::page(&state, paging, filter).await.map(StatusPage)
}

/// Every skill as `{id, name, description}`, for selection lists.
#[utoipa::path(get, path = "/skill/list", tag = "skills", security(("svc_auth" = [])),
    responses((status = 200, body = Env<Vec<s::SkillBrief>>), (status = 401)))]
async fn list(State(state): State<AppState>, user: CurrentUser) -> StatusResult<Vec<s::SkillBrief>> {
    service::list(&state, &user).await.map(StatusApi)
}

#[utoipa::path(get, path = "/skill/{id}", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<s::Skill>), (status = 401), (status = 404)))]
async fn detail(State(state): State<AppState>, _user: CurrentUser, Path(id): Path<i64>) -> StatusResult<s::Skill> {
    service::detail(&state, id).await.map(StatusApi)
}

/// Create a skill online: metadata only, with a starter `SKILL.md`.
#[utoipa::path(post, path = "/skill", tag = "skills", security(("svc_auth" = [])), request_body = s::CreateSkill,
    responses((status = 200, body = Env<s::Skill>), (status = 400), (status = 401)))]
async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<s::CreateSkill>,
) -> StatusResult<s::Skill> {
    service::create(&state, &user, req).await.map(StatusApi)
}

/// Change name and/or description (also written into `SKILL.md`).
#[utoipa::path(put, path = "/skill/{id}", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = s::UpdateSkill,
    responses((status = 200, body = Env<s::Skill>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409)))]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<s::UpdateSkill>,
) -> StatusResult<s::Skill> {
    service::update(&state, &user, id, req).await.map(StatusApi)
}

/// Delete a skill, its package, and its binding to every agent.
#[utoipa::path(delete, path = "/skill/{id}", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> StatusResult<Empty> {
    service::delete(&state, &user, id).await.map(|()| StatusApi(Empty))
}

// The multipart form of a skill upload. The handler reads the body into it and the API
// document is generated from it, so the two cannot name different fields.
#[derive(utoipa::ToSchema)]
struct SkillUploadForm {
    /// A zip package with `SKILL.md` at its root (or in its single top-level folder).
    #[schema(value_type = String, format = Binary, content_media_type = "application/zip")]
    file: Vec<UploadedFile>,
}

impl SkillUploadForm {
    /// Reads the body, refusing a zip above SKILL_MAX_PACKAGE_BYTES while it streams in.
    async fn read(state: &AppState, multipart: MultipartBody) -> AppResult<Self> {
        let limits = FormLimits::one_file(state.config().skill_limits.max_package_bytes);
        let mut form: Form = read_form(multipart, limits).await?;
        Ok(Self {
            file: form.take_files("file"),
        })
    }
}

/// Upload a zip package; name and description come from its `SKILL.md` front matter.
#[utoipa::path(post, path = "/skill/upload", tag = "skills", security(("svc_auth" = [])),
    request_body(content = SkillUploadForm, content_type = "multipart/form-data"),
    responses((status = 200, body = Env<s::Skill>), (status = 400), (status = 401), (status = 413)))]
async fn upload(State(state): State<AppState>, user: CurrentUser, multipart: MultipartBody) -> StatusResult<s::Skill> {
    let SkillUploadForm { file } = SkillUploadForm::read(&state, multipart).await?;
    service::upload(&state, &user, file).await.map(StatusApi)
}

/// Replace a skill's whole package with an uploaded zip (the way to change files above the
/// online editor's limit); the skill keeps its id and its agents, its name and description
/// come from the new `SKILL.md`.
#[utoipa::path(post, path = "/skill/{id}/upload", tag = "skills", security(("svc_auth" = [])),
    params(("id" = i64, Path), s::VersionQuery),
    request_body(content = SkillUploadForm, content_type = "multipart/form-data"),
    responses((status = 200, body = Env<s::Skill>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409), (status = 413)))]
async fn replace(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Query(q): Query<s::VersionQuery>,
    multipart: MultipartBody,
) -> StatusResult<s::Skill> {
    let SkillUploadForm { file } = SkillUploadForm::read(&state, multipart).await?;
    service::replace(&state, &user, id, file, q.version)
        .await
        .map(StatusApi)
}

/// The package as a zip file.
#[utoipa::path(get, path = "/skill/{id}/download", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, content_type = "application/zip", body = Vec<u8>), (status = 401), (status = 404)))]
async fn download(State(state): State<AppState>, _user: CurrentUser, Path(id): Path<i64>) -> AppResult<Response> {
    let (name, bytes) = service::download(&state, id).await?;
    let headers = [
        (header::CONTENT_TYPE, s::storage::CONTENT_TYPE.to_owned()),
        (
            header::CONTENT_DISPOSITION,
            content_disposition(Disposition::Attachment, &name),
        ),
    ];
    Ok((headers, bytes).into_response())
}

/// Draft a new `SKILL.md` with the default CHAT model (never saved).
#[utoipa::path(post, path = "/skill/ai/generate", tag = "skills", security(("svc_auth" = [])), request_body = s::GenerateRequest,
    responses((status = 200, body = Env<s::Draft>), (status = 400), (status = 401)))]
async fn generate(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<s::GenerateRequest>,
) -> StatusResult<s::Draft> {
    drafts::generate(&state, &user, req).await.map(StatusApi)
}

/// Draft an improved `SKILL.md` of a skill with the default CHAT model (never saved).
#[utoipa::path(post, path = "/skill/{id}/ai/optimize", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = s::OptimizeRequest,
    responses((status = 200, body = Env<s::Draft>), (status = 400), (status = 401), (status = 404)))]
async fn optimize(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<s::OptimizeRequest>,
) -> StatusResult<s::Draft> {
    drafts::optimize(&state, &user, id, req).await.map(StatusApi)
}

/// The package's file tree (root directory node).
#[utoipa::path(get, path = "/skill/{id}/files", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<s::FileNode>), (status = 401), (status = 404)))]
async fn tree(State(state): State<AppState>, _user: CurrentUser, Path(id): Path<i64>) -> StatusResult<s::FileNode> {
    files::tree(&state, id).await.map(StatusApi)
}

/// Create an empty file or a directory.
#[utoipa::path(post, path = "/skill/{id}/files", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = s::CreateEntry,
    responses((status = 200, body = Env<s::Changed>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409), (status = 413)))]
async fn create_entry(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<s::CreateEntry>,
) -> StatusResult<s::Changed> {
    files::create(&state, &user, id, req).await.map(StatusApi)
}

/// Delete a file, or a directory with its contents (`SKILL.md` cannot be deleted).
#[utoipa::path(delete, path = "/skill/{id}/files", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path), s::PathQuery),
    responses((status = 200, body = Env<s::Changed>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409)))]
async fn delete_entry(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Query(q): Query<s::PathQuery>,
) -> StatusResult<s::Changed> {
    files::delete(&state, &user, id, q.path, q.version).await.map(StatusApi)
}

/// A file's content: UTF-8 text, or base64 for binary files.
#[utoipa::path(get, path = "/skill/{id}/files/content", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path), s::PathQuery),
    responses((status = 200, body = Env<s::FileContent>), (status = 400), (status = 401), (status = 404), (status = 413)))]
async fn read_file(
    State(state): State<AppState>,
    _user: CurrentUser,
    Path(id): Path<i64>,
    Query(q): Query<s::PathQuery>,
) -> StatusResult<s::FileContent> {
    files::read(&state, id, q.path).await.map(StatusApi)
}

/// Create or replace a file; writing `SKILL.md` updates name and description.
#[utoipa::path(put, path = "/skill/{id}/files/content", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path), s::PathQuery),
    request_body = s::WriteFile,
    responses((status = 200, body = Env<s::Changed>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409), (status = 413)))]
async fn write_file(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Query(q): Query<s::PathQuery>,
    Json(req): Json<s::WriteFile>,
) -> StatusResult<s::Changed> {
    files::write(&state, &user, id, q.path, req).await.map(StatusApi)
}

/// Move a file or directory to a new path.
#[utoipa::path(put, path = "/skill/{id}/files/rename", tag = "skills", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = s::RenameEntry,
    responses((status = 200, body = Env<Empty>), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409)))]
async fn rename(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<s::RenameEntry>,
) -> StatusResult<Empty> {
    files::rename(&state, &user, id, req).await.map(|_| StatusApi(Empty))
}
