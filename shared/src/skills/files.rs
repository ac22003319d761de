//! Online editing of a skill's files. Every change rebuilds the package and commits it with
//! compare-and-swap on the skill's version (see `storage`).

use base64::Engine;

use super::package::{FileNode, Package, SKILL_MD};
use super::{path, storage, Changed, CreateEntry, FileContent, RenameEntry, SkillRow, WriteFile};
use crate::domain::CurrentUser;
use crate::{validate, AppError, AppResult, AppState};

pub async fn tree(state: &AppState, id: i64) -> AppResult<FileNode> {
    let (row, package) = storage::current(state, id).await?;
    Ok(package.tree(&row.name))
}

fn required_path(field: &str, value: Option<String>) -> AppResult<String> {
    path::field(field, &validate::required(field, value)?)
}

fn too_large(size: u64, limit: u64) -> AppError {
    AppError::PayloadTooLarge(format!(
        "the file is {size} bytes; files above {limit} bytes cannot be opened or saved online \
         (download the package, change it, and upload it again with POST /skill/{{id}}/upload)"
    ))
}

/// A file's bytes, within the online size limit.
pub(super) fn file_bytes<'p>(state: &AppState, package: &'p Package, at: &str) -> AppResult<&'p [u8]> {
    let data = package.file(at).ok_or_else(|| {
        if package.is_dir(at) {
            AppError::validation(format!("path {at:?} is a directory, not a file"))
        } else {
            AppError::NotFound(format!("no file at path {at:?}"))
        }
    })?;
    let limit = state.config().skill_limits.max_file_bytes;
    if data.len() as u64 > limit {
        return Err(too_large(data.len() as u64, limit));
    }
    Ok(data)
}

pub async fn read(state: &AppState, id: i64, raw_path: Option<String>) -> AppResult<FileContent> {
    let at = required_path("path", raw_path)?;
    let (row, package) = storage::current(state, id).await?;
    let data = file_bytes(state, &package, &at)?;
    // Text with a NUL goes as base64 too: the API refuses NUL in JSON, so it could not be
    // saved back as it was read.
    let (content, encoding) = match std::str::from_utf8(data) {
        Ok(text) if !text.contains('\0') => (text.to_owned(), "utf-8"),
        _ => (base64::engine::general_purpose::STANDARD.encode(data), "base64"),
    };
    Ok(FileContent {
        path: at,
        content,
        encoding,
        size: data.len() as u64,
        version: row.version,
    })
}

/// Commits of an edit without a `version` that another change overtook, in a row.
const UNVERSIONED_ATTEMPTS: usize = 4;

/// Applies `edit` to the package of a skill `user` may change and commits it. An edit sent
/// with no `version` is applied again to the package as it is now when another change got in
/// first, as long as that change left the paths the edit is about (`scope`) as the edit found
/// them: a "save all" of several files at once otherwise lost all but one, told of a version
/// its client never had. Another change to those paths (a file added to a folder being
/// deleted, SKILL.md rewritten by a rename of the skill) is a conflict: applied again, the
/// edit undid it unseen.
async fn change(
    state: &AppState,
    user: &CurrentUser,
    id: i64,
    (expected, scope): (Option<i64>, &[&str]),
    edit: impl Fn(&mut Package) -> AppResult<()>,
) -> AppResult<SkillRow> {
    let mut overtaken = 0;
    let mut found = None;
    loop {
        let (row, mut package) = storage::current(state, id).await?;
        storage::may_edit(user, &row, expected)?;
        let now = package.part(scope);
        match &found {
            Some(found) if *found != now => {
                return Err(AppError::Conflict(format!(
                    "{} changed by another edit while this one was being saved; reload and try again",
                    scope.join(" and ")
                )))
            }
            Some(_) => {}
            None => found = Some(now),
        }
        edit(&mut package)?;
        match storage::commit(state, &row, &package, None).await {
            Err(AppError::Conflict(_)) if expected.is_none() => {
                overtaken += 1;
                if overtaken == UNVERSIONED_ATTEMPTS {
                    return Err(AppError::Conflict(format!(
                        "skill {id} was changed by others {UNVERSIONED_ATTEMPTS} times while this edit was being saved; try again"
                    )));
                }
            }
            done => return done,
        }
    }
}

/// Creates or replaces a file. Writing `SKILL.md` updates the skill's name and description
/// from its front matter, which must stay valid.
pub async fn write(
    state: &AppState,
    user: &CurrentUser,
    id: i64,
    raw_path: Option<String>,
    req: WriteFile,
) -> AppResult<Changed> {
    let at = required_path("path", raw_path)?;
    let content = validate::present("content", req.content)?;
    let data = match req
        .encoding
        .as_deref()
        .map(|e| e.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("") | Some("utf-8") | Some("utf8") => content.into_bytes(),
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(content.trim())
            .map_err(|_| AppError::validation("content is not valid base64 (encoding is base64)"))?,
        Some(_) => return Err(AppError::validation("encoding must be utf-8 or base64")),
    };
    let limit = state.config().skill_limits.max_file_bytes;
    if data.len() as u64 > limit {
        return Err(too_large(data.len() as u64, limit));
    }
    let row = change(state, user, id, (req.version, &[&at]), |p| {
        if !p.exists(&at) {
            path::creatable("path", &at)?;
        }
        p.write_file(&at, data.clone())
    })
    .await?;
    Ok(Changed { version: row.version })
}

pub async fn create(state: &AppState, user: &CurrentUser, id: i64, req: CreateEntry) -> AppResult<Changed> {
    let at = required_path("path", req.path)?;
    path::creatable("path", &at)?;
    let directory = match validate::required("type", req.kind)?.as_str() {
        "file" => false,
        "directory" => true,
        _ => return Err(AppError::validation("type must be file or directory")),
    };
    let row = change(state, user, id, (req.version, &[&at]), |p| {
        if p.exists(&at) {
            return Err(AppError::business(format!("path {at:?} already exists")));
        }
        match directory {
            false => p.write_file(&at, Vec::new()),
            true => p.create_dir(&at),
        }
    })
    .await?;
    Ok(Changed { version: row.version })
}

fn keep_skill_md(at: &str, what: &str) -> AppResult<()> {
    if at == SKILL_MD {
        return Err(AppError::validation(format!(
            "SKILL.md is the skill's main instruction file and cannot be {what}"
        )));
    }
    Ok(())
}

pub async fn delete(
    state: &AppState,
    user: &CurrentUser,
    id: i64,
    raw_path: Option<String>,
    expected: Option<i64>,
) -> AppResult<Changed> {
    let at = required_path("path", raw_path)?;
    keep_skill_md(&at, "deleted")?;
    let row = change(state, user, id, (expected, &[&at]), |p| p.remove(&at)).await?;
    Ok(Changed { version: row.version })
}

pub async fn rename(state: &AppState, user: &CurrentUser, id: i64, req: RenameEntry) -> AppResult<Changed> {
    let from = required_path("oldPath", req.old_path)?;
    let to = required_path("newPath", req.new_path)?;
    path::creatable("newPath", &to)?;
    keep_skill_md(&from, "renamed")?;
    let row = change(state, user, id, (req.version, &[&from, &to]), |p| p.rename(&from, &to)).await?;
    Ok(Changed { version: row.version })
}
