//! The skill records: paging, detail, create, upload, metadata update, delete.
//! Any logged-in user may read skills (agents of every user can use them); only a skill's
//! creator or an administrator may change or delete it.

use super::front_matter::{self, FrontMatter};
use super::package::{Package, SKILL_MD};
use super::{repo, storage, CreateSkill, Skill, SkillBrief, SkillFilter, UpdateSkill};
use crate::domain::UploadedFile;
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::{validate, AppError, AppResult, AppState};

const STARTER_BODY: &str = "# Instructions\n\nDescribe when this skill applies and the steps to follow.\n\n\
                            ## Steps\n\n1. ...\n";

pub async fn page(state: &AppState, paging: PageQuery, filter: SkillFilter) -> AppResult<Page<Skill>> {
    let keyword = validate::optional(filter.keyword);
    let (rows, total) = repo::page(state.db(), keyword.as_deref(), paging.size(), paging.offset()).await?;
    Ok(Page::new(rows.into_iter().map(Skill::from).collect(), paging, total))
}

pub async fn detail(state: &AppState, id: i64) -> AppResult<Skill> {
    storage::load(state, id).await.map(Skill::from)
}

pub async fn list(state: &AppState, user: &CurrentUser) -> AppResult<Vec<SkillBrief>> {
    Ok(repo::selection(state.db(), user.id).await?)
}

fn checked(name: String, description: String) -> AppResult<FrontMatter> {
    front_matter::check(&name, &description).map_err(AppError::Validation)?;
    Ok(FrontMatter { name, description })
}

/// A skill with a starter `SKILL.md` built from the metadata.
pub async fn create(state: &AppState, user: &CurrentUser, req: CreateSkill) -> AppResult<Skill> {
    let name = validate::required("name", req.name)?;
    let meta = checked(name, validate::optional(req.description).unwrap_or_default())?;
    let package = Package::with_skill_md(&front_matter::document(&meta, STARTER_BODY));
    storage::create(state, user, &package, "").await.map(Skill::from)
}

/// The one zip of an upload, opened with every check, and the name it was sent under.
fn uploaded(state: &AppState, mut files: Vec<UploadedFile>) -> AppResult<(Package, String)> {
    if files.len() > 1 {
        return Err(AppError::validation("file: send exactly one zip file"));
    }
    let file = files
        .pop()
        .ok_or_else(|| AppError::validation("file is required (a zip package holding SKILL.md)"))?;
    let package = Package::open_upload(&file.bytes, &state.config().skill_limits)?;
    // Shown in lists and offered as the download's name: cleaned as any upload's is. None
    // given, the download is offered as `<name>.zip`.
    let file_name = match file.file_name.trim().is_empty() {
        true => String::new(),
        false => crate::resources::service::clean_file_name(&file.file_name),
    };
    Ok((package, file_name))
}

/// A skill from an uploaded zip; its metadata comes from the package's `SKILL.md`.
pub async fn upload(state: &AppState, user: &CurrentUser, files: Vec<UploadedFile>) -> AppResult<Skill> {
    let (package, file_name) = uploaded(state, files)?;
    storage::create(state, user, &package, &file_name)
        .await
        .map(Skill::from)
}

/// Replaces a skill's whole package with an uploaded zip: the skill keeps its id and the
/// agents bound to it, and its metadata comes from the new `SKILL.md`. The way to change a
/// file above the online editor's limit.
pub async fn replace(
    state: &AppState,
    user: &CurrentUser,
    id: i64,
    files: Vec<UploadedFile>,
    version: Option<i64>,
) -> AppResult<Skill> {
    let row = storage::editable(state, user, id, version).await?;
    let (package, file_name) = uploaded(state, files)?;
    let file_name = Some(file_name.as_str()).filter(|n| !n.is_empty());
    storage::commit(state, &row, &package, file_name).await.map(Skill::from)
}

/// Changes name and/or description, in the row and in `SKILL.md`'s front matter.
pub async fn update(state: &AppState, user: &CurrentUser, id: i64, req: UpdateSkill) -> AppResult<Skill> {
    let (row, mut package) = storage::current(state, id).await?;
    storage::may_edit(user, &row, req.version)?;
    if req.name.is_none() && req.description.is_none() {
        return Ok(row.into());
    }
    let name = match req.name {
        Some(n) => validate::required("name", Some(n))?,
        None => row.name.clone(),
    };
    let description = req
        .description
        .map(|d| d.trim().to_owned())
        .unwrap_or_else(|| row.description.clone());
    let meta = checked(name, description)?;
    let current = skill_md_text(&package)?;
    let rewritten = front_matter::with_metadata(&current, &meta).map_err(AppError::Validation)?;
    package.write_file(SKILL_MD, rewritten.into_bytes())?;
    storage::commit(state, &row, &package, None).await.map(Skill::from)
}

pub fn skill_md_text(package: &Package) -> AppResult<String> {
    let bytes = package
        .file(SKILL_MD)
        .ok_or_else(|| AppError::validation("the package has no SKILL.md"))?;
    String::from_utf8(bytes.to_vec()).map_err(|_| AppError::validation("SKILL.md must be UTF-8 text"))
}

pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    let row = storage::editable(state, user, id, None).await?;
    storage::delete(state, &row).await
}

/// The zip of a skill and the file name to offer it under.
pub async fn download(state: &AppState, id: i64) -> AppResult<(String, bytes::Bytes)> {
    let (row, bytes) = storage::current_bytes(state, id).await?;
    let name = if row.file_name.is_empty() {
        format!("{}.zip", row.name)
    } else {
        row.file_name
    };
    Ok((name, bytes))
}
