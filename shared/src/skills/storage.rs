//! A skill's package in object storage. Every change writes a new object, swaps the row to it
//! if the row is still at the version the change started from, then deletes the old object;
//! a lost race deletes the new object instead and reports a conflict. Readers therefore
//! always see one whole package, and no edit silently overwrites another.

use bytes::Bytes;

use super::front_matter::{self, FrontMatter};
use super::package::{Package, SKILL_MD};
use super::path;
use super::repo::{self, NewPackage, NewSkill};
use super::SkillRow;
use crate::creation_cap::{self, Created};
use crate::domain::CurrentUser;
use crate::resources::leftovers;
use crate::storage::{read_all, StorageError};
use crate::{AppError, AppResult, AppState};

pub const CONTENT_TYPE: &str = "application/zip";

/// Reads of a package racing that many changes in a row give up.
const MAX_READ_ATTEMPTS: usize = 5;

pub async fn load(state: &AppState, id: i64) -> AppResult<SkillRow> {
    repo::find(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("skill"))
}

/// The skill, if `user` may change it (see [`may_edit`]).
pub async fn editable(state: &AppState, user: &CurrentUser, id: i64, expected: Option<i64>) -> AppResult<SkillRow> {
    let row = load(state, id).await?;
    may_edit(user, &row, expected)?;
    Ok(row)
}

/// `user` may change the skill (its creator or an administrator) and, when `expected` is
/// given, it is still at that version.
pub fn may_edit(user: &CurrentUser, row: &SkillRow, expected: Option<i64>) -> AppResult<()> {
    if !user.can_manage(row.creator_id) {
        return Err(AppError::Forbidden(
            "only the skill's creator or an administrator may change it".into(),
        ));
    }
    match expected {
        Some(v) if v != row.version => Err(conflict(row.id, v, row.version)),
        _ => Ok(()),
    }
}

fn conflict(id: i64, had: i64, now: i64) -> AppError {
    AppError::Conflict(format!(
        "skill {id} was changed by someone else (you had version {had}, it is now version {now}); \
         reload it and apply your change again"
    ))
}

/// The current row and its zipped package. A concurrent change may delete the object the
/// row pointed at before or while it is read; when the row has moved on, it is read again.
pub async fn current_bytes(state: &AppState, id: i64) -> AppResult<(SkillRow, Bytes)> {
    let mut row = load(state, id).await?;
    for _ in 0..MAX_READ_ATTEMPTS {
        let failure = match read_all(state.storage(), &row.storage_key, None).await {
            Ok(bytes) => return Ok((row, bytes)),
            Err(e) => e,
        };
        let now = load(state, id).await?;
        if now.storage_key == row.storage_key {
            return Err(match failure {
                StorageError::NotFound => AppError::Internal(anyhow::anyhow!(
                    "the package object {} of skill {id} is missing",
                    row.storage_key
                )),
                other => other.into(),
            });
        }
        row = now;
    }
    Err(AppError::Conflict(format!(
        "skill {id} was changed by someone else several times while it was being read; try again"
    )))
}

/// The current row and its package, opened with every safety check.
pub async fn current(state: &AppState, id: i64) -> AppResult<(SkillRow, Package)> {
    let (row, bytes) = current_bytes(state, id).await?;
    let package = Package::open(&bytes, &state.config().skill_limits)?;
    Ok((row, package))
}

/// The name and description a package declares in its `SKILL.md`.
pub fn metadata(package: &Package) -> AppResult<FrontMatter> {
    let content = package
        .file(SKILL_MD)
        .ok_or_else(|| AppError::validation("the package must have a SKILL.md file at its root"))?;
    let text = std::str::from_utf8(content).map_err(|_| AppError::validation("SKILL.md must be UTF-8 text"))?;
    front_matter::parse(text).map_err(AppError::Validation)
}

/// Packs and writes the package under a fresh key; returns the key, size and metadata.
/// A skill's name other users see; `replaced` is the name it had, kept as it was.
async fn put(state: &AppState, package: &Package, replaced: Option<&str>) -> AppResult<(String, i64, FrontMatter)> {
    let limits = &state.config().skill_limits;
    package.check_limits(limits)?;
    package.check_skill_md(limits)?;
    let meta = metadata(package)?;
    if replaced != Some(meta.name.as_str()) && meta.name.chars().any(path::misleading) {
        return Err(AppError::validation(format!("name {}", path::MISLEADING)));
    }
    let bytes = package.to_zip(limits)?;
    if bytes.len() as u64 > limits.max_package_bytes {
        return Err(AppError::PayloadTooLarge(format!(
            "the package would be {} bytes zipped; the limit is {} bytes",
            bytes.len(),
            limits.max_package_bytes
        )));
    }
    let key = format!("skills/{}.zip", uuid::Uuid::new_v4());
    let size = bytes.len() as i64;
    leftovers::put_ahead(state, &key, bytes.into(), CONTENT_TYPE).await?;
    Ok((key, size, meta))
}

async fn discard(state: &AppState, key: &str) {
    leftovers::delete(state, &[key.to_owned()]).await;
}

/// Stores a new skill's package and inserts its row.
pub async fn create(state: &AppState, user: &CurrentUser, package: &Package, file_name: &str) -> AppResult<SkillRow> {
    // Counted before the package is stored, so a refusal stores nothing; without a
    // transaction across the upload, creations racing each other may pass the cap by a few.
    creation_cap::check_early(state, user, Created::Skill).await?;
    let (key, size, meta) = put(state, package, None).await?;
    let new = NewSkill {
        name: &meta.name,
        description: &meta.description,
        file_name,
        file_size: size,
        storage_key: &key,
        creator_id: user.id,
    };
    match repo::insert(state.db(), &new).await {
        Ok(row) => Ok(row),
        Err(e) => {
            leftovers::unnamed(state, &key, leftovers::certain(&e)).await;
            Err(e.into())
        }
    }
}

/// Replaces the package of `row`, unless the row moved on since it was read. `file_name`:
/// the name of an uploaded package that replaces the whole one (kept when None).
pub async fn commit(
    state: &AppState,
    row: &SkillRow,
    package: &Package,
    file_name: Option<&str>,
) -> AppResult<SkillRow> {
    let (key, size, meta) = put(state, package, Some(&row.name)).await?;
    let next = NewPackage {
        name: &meta.name,
        description: &meta.description,
        file_size: size,
        storage_key: &key,
        file_name,
    };
    match repo::swap_package(state.db(), row, &next).await {
        Ok(Some(updated)) => {
            discard(state, &row.storage_key).await;
            Ok(updated)
        }
        Ok(None) => {
            leftovers::unnamed(state, &key, true).await;
            match repo::find(state.db(), row.id).await? {
                Some(now) => Err(conflict(row.id, row.version, now.version)),
                None => Err(AppError::not_found("skill")),
            }
        }
        Err(e) => {
            leftovers::unnamed(state, &key, leftovers::certain(&e)).await;
            Err(e.into())
        }
    }
}

/// Deletes the row (unbinding it from agents in the same transaction), then its object. The
/// row is locked first: an agent being bound to it holds it, and is waited for, so the unbind
/// after sees that agent too.
pub async fn delete(state: &AppState, row: &SkillRow) -> AppResult<()> {
    let mut tx = state.db().begin().await?;
    repo::lock(&mut *tx, row.id).await?;
    repo::unbind_from_agents(&mut *tx, row.id).await?;
    let key = repo::delete(&mut *tx, row.id)
        .await?
        .ok_or_else(|| AppError::not_found("skill"))?;
    let keys = [key];
    leftovers::going(&mut tx, &keys).await?;
    tx.commit().await?;
    leftovers::delete(state, &keys).await;
    Ok(())
}
