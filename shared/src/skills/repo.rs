//! SQL of the skill module.

use crate::resources::leftovers::take_back;
use sqlx::{PgExecutor, PgPool, Postgres, QueryBuilder};

use super::{SkillBrief, SkillRow};
use crate::users::repo::escape_like;

const COLUMNS: &str =
    "id, name, description, file_name, file_size, storage_key, version, creator_id, create_dt, update_dt";

pub struct NewSkill<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub file_name: &'a str,
    pub file_size: i64,
    pub storage_key: &'a str,
    pub creator_id: i64,
}

pub async fn insert(db: &PgPool, s: &NewSkill<'_>) -> sqlx::Result<SkillRow> {
    sqlx::query_as(&format!(
        "{} INSERT INTO skills (name, description, file_name, file_size, storage_key, creator_id)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {COLUMNS}",
        take_back(5)
    ))
    .bind(s.name)
    .bind(s.description)
    .bind(s.file_name)
    .bind(s.file_size)
    .bind(s.storage_key)
    .bind(s.creator_id)
    .fetch_one(db)
    .await
}

pub async fn find(db: &PgPool, id: i64) -> sqlx::Result<Option<SkillRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM skills WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// The new state of a package after an edit.
pub struct NewPackage<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub file_size: i64,
    pub storage_key: &'a str,
    /// The uploaded file's name, when a package replaces the whole one; kept when None.
    pub file_name: Option<&'a str>,
}

/// Points the row at a new package if it is still at `version` (compare and swap); None when
/// someone else changed or deleted it first.
pub async fn swap_package(db: &PgPool, old: &SkillRow, p: &NewPackage<'_>) -> sqlx::Result<Option<SkillRow>> {
    // The new package's note goes only with the swap: on a conflict the package is deleted
    // by the caller, and a request ending before that leaves it to the housekeeping. The old
    // package is noted with the swap, due now (see `leftovers::going`).
    sqlx::query_as(&format!(
        "WITH updated AS (
           UPDATE skills SET name = $3, description = $4, file_size = $5, storage_key = $6,
                  file_name = COALESCE($8, file_name), version = version + 1, update_dt = now()
           WHERE id = $1 AND version = $2 RETURNING {COLUMNS}),
         taken_back AS (
           DELETE FROM leftover_objects WHERE storage_key = $6 AND EXISTS (SELECT 1 FROM updated)),
         going AS (
           INSERT INTO leftover_objects (storage_key) SELECT $7 FROM updated
           ON CONFLICT (storage_key) DO UPDATE SET due_at = LEAST(leftover_objects.due_at, now()))
         SELECT * FROM updated"
    ))
    .bind(old.id)
    .bind(old.version)
    .bind(p.name)
    .bind(p.description)
    .bind(p.file_size)
    .bind(p.storage_key)
    .bind(&old.storage_key)
    .bind(p.file_name)
    .fetch_optional(db)
    .await
}

/// Deletes the row and returns its storage key.
pub async fn delete(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("DELETE FROM skills WHERE id = $1 RETURNING storage_key")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Locks the skill's row for the rest of the transaction.
pub async fn lock(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT 1 FROM skills WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(db)
        .await
        .map(|_| ())
}

/// Unbinds a deleted skill from every agent.
pub async fn unbind_from_agents(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE agents SET skill_ids = array_remove(skill_ids, $1), update_dt = now() WHERE $1 = ANY (skill_ids)",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(())
}

fn push_filter<'a>(qb: &mut QueryBuilder<'a, Postgres>, keyword: Option<&'a str>) {
    if let Some(k) = keyword {
        let pattern = format!("%{}%", escape_like(k));
        qb.push(" WHERE (name ILIKE ")
            .push_bind(pattern.clone())
            .push(" OR description ILIKE ")
            .push_bind(pattern)
            .push(")");
    }
}

pub async fn page(db: &PgPool, keyword: Option<&str>, limit: i64, offset: i64) -> sqlx::Result<(Vec<SkillRow>, i64)> {
    let mut count = QueryBuilder::new("SELECT count(*) FROM skills");
    push_filter(&mut count, keyword);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    let mut rows = QueryBuilder::new(format!("SELECT {COLUMNS} FROM skills"));
    push_filter(&mut rows, keyword);
    rows.push(" ORDER BY update_dt DESC, id DESC LIMIT ")
        .push_bind(limit)
        .push(" OFFSET ")
        .push_bind(offset);
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}

/// The skills `ids` name, in the order asked for (an agent's skills keep the order they were
/// bound in).
pub async fn briefs(db: &PgPool, ids: &[i64]) -> sqlx::Result<Vec<SkillBrief>> {
    sqlx::query_as("SELECT id, name, description FROM skills WHERE id = ANY ($1) ORDER BY array_position($1, id)")
        .bind(ids)
        .fetch_all(db)
        .await
}

/// Skills a selection list offers at most: any signed-in user may create skills, and all of
/// them listed grew past a function's answer for everyone (413) once one user made thousands.
pub const SELECTION_MAX: i64 = 1000;

/// The first `SELECTION_MAX` skills for `user`'s selection lists: their own, then
/// administrators', then the rest, each by name.
pub async fn selection(db: &PgPool, user: i64) -> sqlx::Result<Vec<SkillBrief>> {
    sqlx::query_as(
        "SELECT id, name, description FROM skills
         ORDER BY creator_id <> $1, NOT EXISTS (SELECT 1 FROM users u WHERE u.id = creator_id AND u.role = $2),
                  name, id
         LIMIT $3",
    )
    .bind(user)
    .bind(crate::domain::Role::Admin.code())
    .bind(SELECTION_MAX)
    .fetch_all(db)
    .await
}
