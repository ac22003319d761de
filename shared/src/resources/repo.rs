//! SQL of the resources module.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool, Postgres, QueryBuilder};

use super::{ResourceFilter, ResourceRow, KB_PREVIEW_BIZ_TYPE};
use crate::users::repo::escape_like;

const COLUMNS: &str =
    "id, storage_key, original_name, file_size, mime_type, storage_type, biz_type, biz_id, content_hash, creator_id, create_dt";

pub struct NewResource<'a> {
    pub storage_key: &'a str,
    pub original_name: &'a str,
    pub file_size: i64,
    pub mime_type: &'a str,
    pub storage_type: &'a str,
    pub biz_type: Option<&'a str>,
    pub biz_id: Option<i64>,
    pub content_hash: Option<&'a str>,
    pub creator_id: i64,
}

pub async fn insert(db: impl PgExecutor<'_>, r: &NewResource<'_>) -> sqlx::Result<ResourceRow> {
    sqlx::query_as(&format!(
        "{} INSERT INTO resources (storage_key, original_name, file_size, mime_type, storage_type, biz_type,
         biz_id, content_hash, creator_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {COLUMNS}",
        super::leftovers::take_back(1)
    ))
    .bind(r.storage_key)
    .bind(r.original_name)
    .bind(r.file_size)
    .bind(r.mime_type)
    .bind(r.storage_type)
    .bind(r.biz_type)
    .bind(r.biz_id)
    .bind(r.content_hash)
    .bind(r.creator_id)
    .fetch_one(db)
    .await
}

pub async fn find(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<ResourceRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM resources WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Who is reading through `/resource`.
#[derive(Debug, Clone, Copy)]
pub struct Reader {
    pub user_id: i64,
    pub admin: bool,
}

/// The rows `reader` may read, list and delete through `/resource`. An external user's image
/// carries the app creator as `creator_id` only so that the row has an owner; it belongs to
/// the external user, who never comes through `/resource`, so nobody reads it here. A
/// knowledge-base upload preview is a staging copy of someone's upload in progress: only the
/// uploader reads it (administrators see the committed document through the base instead).
/// Everything else: its owner, and administrators.
fn push_readable(qb: &mut QueryBuilder<'_, Postgres>, reader: Reader) {
    qb.push(" AND NOT EXISTS (SELECT 1 FROM external_resources e WHERE e.resource_id = resources.id)");
    qb.push(" AND (creator_id = ").push_bind(reader.user_id);
    if reader.admin {
        qb.push(" OR biz_type IS DISTINCT FROM ").push_bind(KB_PREVIEW_BIZ_TYPE);
    }
    qb.push(")");
}

/// The resource if `reader` may read it; None exactly as for an unknown id.
pub async fn find_readable(
    db: impl PgExecutor<'_>,
    id: i64,
    reader: Reader,
    for_update: bool,
) -> sqlx::Result<Option<ResourceRow>> {
    let mut qb = QueryBuilder::new(format!("SELECT {COLUMNS} FROM resources WHERE id = "));
    qb.push_bind(id);
    push_readable(&mut qb, reader);
    if for_update {
        qb.push(" FOR UPDATE");
    }
    qb.build_query_as().fetch_optional(db).await
}

/// The caller's own upload through `/resource`, None for any other row as for an unknown id.
pub async fn find_own_upload(db: impl PgExecutor<'_>, id: i64, creator_id: i64) -> sqlx::Result<Option<ResourceRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM resources WHERE id = $1 {OWN_UPLOAD}"))
        .bind(id)
        .bind(creator_id)
        .fetch_optional(db)
        .await
}

/// `find_own_upload` of several, locked for a change (in id order, so that two callers
/// locking overlapping sets wait for each other instead of each holding one).
pub async fn lock_own_uploads(db: impl PgExecutor<'_>, ids: &[i64], creator_id: i64) -> sqlx::Result<Vec<ResourceRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM resources WHERE id = ANY($1) {OWN_UPLOAD} ORDER BY id FOR UPDATE"
    ))
    .bind(ids)
    .bind(creator_id)
    .fetch_all(db)
    .await
}

/// A row uploaded through `/resource` by `$2`: not an external user's image.
const OWN_UPLOAD: &str =
    "AND creator_id = $2 AND NOT EXISTS (SELECT 1 FROM external_resources e WHERE e.resource_id = resources.id)";

/// Makes an upload a file of the upload preview of base `rag_id`.
pub async fn move_to_preview(db: impl PgExecutor<'_>, id: i64, rag_id: i64, content_hash: &str) -> sqlx::Result<()> {
    sqlx::query("UPDATE resources SET biz_type = $2, biz_id = $3, content_hash = $4 WHERE id = $1")
        .bind(id)
        .bind(KB_PREVIEW_BIZ_TYPE)
        .bind(rag_id)
        .bind(content_hash)
        .execute(db)
        .await?;
    Ok(())
}

/// Whether a row already holds this object.
pub async fn is_registered(db: impl PgExecutor<'_>, storage_key: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM resources WHERE storage_key = $1)")
        .bind(storage_key)
        .fetch_one(db)
        .await
}

/// An image the external user uploaded through the external API; None exactly as for an
/// unknown id (another external user's image, anything uploaded through `/resource`).
pub async fn find_external_upload(
    db: impl PgExecutor<'_>,
    id: i64,
    external_user_id: i64,
) -> sqlx::Result<Option<ResourceRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM resources WHERE id = $1 AND EXISTS (
           SELECT 1 FROM external_resources e WHERE e.resource_id = resources.id AND e.external_user_id = $2)"
    ))
    .bind(id)
    .bind(external_user_id)
    .fetch_optional(db)
    .await
}

pub async fn delete(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM resources WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

pub struct PageFilter<'a> {
    pub reader: Reader,
    pub filter: &'a ResourceFilter,
    pub created: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

fn push_filter<'a>(qb: &mut QueryBuilder<'a, Postgres>, f: &'a PageFilter<'a>) {
    qb.push(" WHERE TRUE");
    push_readable(qb, f.reader);
    if let Some(t) = &f.filter.biz_type {
        qb.push(" AND biz_type = ").push_bind(t);
    }
    if let Some(id) = f.filter.biz_id {
        qb.push(" AND biz_id = ").push_bind(id);
    }
    if let Some(name) = f
        .filter
        .original_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        qb.push(" AND original_name ILIKE ")
            .push_bind(format!("%{}%", escape_like(name)));
    }
    if let Some((start, end)) = f.created {
        qb.push(" AND create_dt BETWEEN ")
            .push_bind(start)
            .push(" AND ")
            .push_bind(end);
    }
}

pub async fn page(db: &PgPool, f: &PageFilter<'_>, limit: i64, offset: i64) -> sqlx::Result<(Vec<ResourceRow>, i64)> {
    let mut count = QueryBuilder::new("SELECT count(*) FROM resources");
    push_filter(&mut count, f);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    let mut rows = QueryBuilder::new(format!("SELECT {COLUMNS} FROM resources"));
    push_filter(&mut rows, f);
    rows.push(" ORDER BY create_dt DESC, id DESC LIMIT ")
        .push_bind(limit)
        .push(" OFFSET ")
        .push_bind(offset);
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}
