//! What other modules use of skills: agent detail and update, and agent chat.

use sqlx::PgPool;

use super::{files, path, repo, storage, SkillBrief};
use crate::{AppError, AppResult, AppState};

/// The skills of `ids` that exist, in the order of `ids` (unknown ids are skipped).
pub async fn briefs(db: &PgPool, ids: &[i64]) -> AppResult<Vec<SkillBrief>> {
    Ok(repo::briefs(db, ids).await?)
}

/// Which of `ids` exist, in the order of `ids`.
pub async fn existing_ids(db: &PgPool, ids: &[i64]) -> AppResult<Vec<i64>> {
    Ok(briefs(db, ids).await?.into_iter().map(|b| b.id).collect())
}

/// A validation error naming `field` and the ids that do not exist, if any.
pub async fn ensure_exist(db: &PgPool, field: &str, ids: &[i64]) -> AppResult<()> {
    let found = existing_ids(db, ids).await?;
    let missing: Vec<String> = ids
        .iter()
        .filter(|id| !found.contains(id))
        .map(i64::to_string)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(AppError::validation(format!(
            "{field}: no skill with id {}",
            missing.join(", ")
        )))
    }
}

/// A UTF-8 text file of a skill's package (`SKILL.md` or any supporting file), at most
/// `SKILL_MAX_FILE_BYTES` long. Not found: the skill or the file; validation: a bad path or a
/// binary file; too large: over the cap.
pub async fn read_text_file(state: &AppState, skill_id: i64, path: &str) -> AppResult<String> {
    let at = path::field("path", path)?;
    let (_, package) = storage::current(state, skill_id).await?;
    let data = files::file_bytes(state, &package, &at)?;
    String::from_utf8(data.to_vec()).map_err(|_| AppError::validation(format!("{at} is not a UTF-8 text file")))
}
