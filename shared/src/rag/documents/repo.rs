//! SQL of documents, images and upload previews.

use sqlx::{PgConnection, PgExecutor, PgPool};

use super::{DocImageView, DocRow, StoredItem};

const COLUMNS: &str =
    "id, rag_id, name, file_type, source_type, source_path, storage_key, mime_type, file_size, content_hash,
    status, progress, error_stage, error_message, timings, chunk_count, run_id, creator_id, payer_id, created_at, updated_at";

pub async fn find(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<DocRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM documents WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Documents of the bases `owner` may see (all bases when None), optionally of one base.
pub async fn page(
    db: &PgPool,
    owner: Option<i64>,
    rag_id: Option<i64>,
    limit: i64,
    offset: i64,
) -> sqlx::Result<(Vec<DocRow>, i64)> {
    const FILTER: &str = "FROM documents d JOIN knowledge_bases k ON k.id = d.rag_id
        WHERE ($1::bigint IS NULL OR k.creator_id = $1) AND ($2::bigint IS NULL OR d.rag_id = $2)";
    let total: i64 = sqlx::query_scalar(&format!("SELECT count(*) {FILTER}"))
        .bind(owner)
        .bind(rag_id)
        .fetch_one(db)
        .await?;
    let cols = COLUMNS
        .split(',')
        .map(|c| format!("d.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = sqlx::query_as(&format!("SELECT {cols} {FILTER} ORDER BY d.id DESC LIMIT $3 OFFSET $4"))
        .bind(owner)
        .bind(rag_id)
        .bind(limit)
        .bind(offset)
        .fetch_all(db)
        .await?;
    Ok((rows, total))
}

/// The document with this content hash and the one with this name (case-insensitive), if any.
pub async fn conflicts(
    db: impl PgExecutor<'_>,
    rag_id: i64,
    name: &str,
    hash: &str,
) -> sqlx::Result<(Option<(i64, String)>, Option<(i64, String)>)> {
    let rows: Vec<(i64, String, bool, bool)> = sqlx::query_as(
        "SELECT id, name, lower(name) = lower($2), content_hash = $3 FROM documents
         WHERE rag_id = $1 AND (lower(name) = lower($2) OR content_hash = $3) ORDER BY id",
    )
    .bind(rag_id)
    .bind(name)
    .bind(hash)
    .fetch_all(db)
    .await?;
    let by_name = rows.iter().find(|r| r.2).map(|r| (r.0, r.1.clone()));
    let by_content = rows.iter().find(|r| r.3).map(|r| (r.0, r.1.clone()));
    Ok((by_name, by_content))
}

pub struct NewDoc<'a> {
    pub rag_id: i64,
    pub name: &'a str,
    pub file_type: &'a str,
    pub source_type: &'a str,
    pub source_path: &'a str,
    pub storage_key: &'a str,
    pub mime_type: &'a str,
    pub file_size: i64,
    pub content_hash: &'a str,
    pub creator_id: i64,
}

/// Makes the base's document additions (upload commits, URL imports) take turns until the
/// caller's transaction ends, so each decides about duplicates against the others' results.
pub async fn lock_additions(conn: &mut sqlx::PgConnection, rag_id: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('kb-documents:' || $1::text))")
        .bind(rag_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Inserts a pending document, taking back the note of an object written ahead of it (see
/// `resources::leftovers`); returns (id, run id).
pub async fn insert(db: impl PgExecutor<'_>, d: &NewDoc<'_>) -> sqlx::Result<(i64, uuid::Uuid)> {
    sqlx::query_as(&format!(
        "{} INSERT INTO documents (rag_id, name, file_type, source_type, source_path, storage_key, mime_type,
         file_size, content_hash, creator_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id, run_id",
        crate::resources::leftovers::take_back(6)
    ))
    .bind(d.rag_id)
    .bind(d.name)
    .bind(d.file_type)
    .bind(d.source_type)
    .bind(d.source_path)
    .bind(d.storage_key)
    .bind(d.mime_type)
    .bind(d.file_size)
    .bind(d.content_hash)
    .bind(d.creator_id)
    .fetch_one(db)
    .await
}

/// Objects of a document: its file and its images. The document's row is locked first, in a
/// statement of its own: a processing run that commits its images meanwhile is waited for and
/// its images are read too (one statement reads them as of the moment it started).
pub async fn object_keys(conn: &mut PgConnection, id: i64) -> sqlx::Result<Vec<String>> {
    sqlx::query("SELECT 1 FROM documents WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    sqlx::query_scalar(
        "SELECT storage_key FROM documents WHERE id = $1 UNION ALL SELECT storage_key FROM document_images WHERE document_id = $1",
    )
    .bind(id)
    .fetch_all(conn)
    .await
}

pub async fn delete(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM documents WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// Starts a new processing run: pending, progress 0, a fresh run id that supersedes any
/// run in flight. None when the document is gone (deleted or overwritten meanwhile).
/// Starts a new run of the document, paid for by `payer`.
pub async fn restart(db: impl PgExecutor<'_>, id: i64, payer: i64) -> sqlx::Result<Option<uuid::Uuid>> {
    sqlx::query_scalar(
        "UPDATE documents SET status = 'pending', progress = 0, error_stage = NULL, error_message = NULL,
         run_id = gen_random_uuid(), lease_until = NULL, payer_id = $2, updated_at = now() WHERE id = $1 RETURNING run_id",
    )
    .bind(id)
    .bind(payer)
    .fetch_optional(db)
    .await
}

pub async fn mark_failed(
    db: impl PgExecutor<'_>,
    id: i64,
    run_id: uuid::Uuid,
    stage: &str,
    message: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE documents SET status = 'failed', error_stage = $3, error_message = $4, lease_until = NULL, updated_at = now()
         WHERE id = $1 AND run_id = $2 AND status NOT IN ('success', 'failed')",
    )
    .bind(id)
    .bind(run_id)
    .bind(stage)
    .bind(message)
    .execute(db)
    .await?;
    Ok(())
}

/// Marks failed the run `run_id` of a document at the stage it was in (its status), with
/// `message`; a run already finished, or replaced, is left as it is.
pub async fn fail_at_stage(db: &PgPool, id: i64, run_id: uuid::Uuid, message: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE documents SET error_stage = status, status = 'failed', error_message = $3, lease_until = NULL,
           updated_at = now()
         WHERE id = $1 AND run_id = $2 AND status NOT IN ('success', 'failed')",
    )
    .bind(id)
    .bind(run_id)
    .bind(message)
    .execute(db)
    .await?;
    Ok(())
}

const IMAGE_COLUMNS: &str = "i.id, i.rag_id, i.document_id, i.chunk_id, i.resource_id, i.image_index, i.caption,
    i.figure_no, i.figure_title, i.section_title, d.name AS document_name, i.ocr_text, i.source_page, i.create_dt,
    i.update_dt";

/// Images of a document, in image order.
pub async fn images_of(db: &PgPool, document_id: i64) -> sqlx::Result<Vec<ImageRow>> {
    sqlx::query_as(&format!(
        "SELECT {IMAGE_COLUMNS} FROM document_images i JOIN documents d ON d.id = i.document_id
         WHERE i.document_id = $1 ORDER BY i.image_index"
    ))
    .bind(document_id)
    .fetch_all(db)
    .await
}

/// Images of the documents the given chunks of base `rag_id` belong to, in document and image
/// order. Keyed by chunk so search can run it beside loading the chunks.
pub async fn images_of_chunks(db: &PgPool, rag_id: i64, chunk_ids: &[i64]) -> sqlx::Result<Vec<ImageRow>> {
    sqlx::query_as(&format!(
        "SELECT {IMAGE_COLUMNS} FROM document_images i JOIN documents d ON d.id = i.document_id
         WHERE i.rag_id = $2 AND i.document_id IN (SELECT c.document_id FROM chunks c WHERE c.id = ANY($1) AND c.rag_id = $2)
         ORDER BY i.document_id, i.image_index"
    ))
    .bind(chunk_ids)
    .bind(rag_id)
    .fetch_all(db)
    .await
}

/// A saved document image with its document's name.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ImageRow {
    pub id: i64,
    pub rag_id: i64,
    pub document_id: i64,
    pub chunk_id: Option<i64>,
    pub resource_id: Option<i64>,
    pub image_index: i32,
    pub caption: Option<String>,
    pub figure_no: Option<String>,
    pub figure_title: Option<String>,
    pub section_title: Option<String>,
    pub document_name: String,
    pub ocr_text: Option<String>,
    pub source_page: Option<i32>,
    pub create_dt: chrono::DateTime<chrono::Utc>,
    pub update_dt: chrono::DateTime<chrono::Utc>,
}

impl ImageRow {
    pub fn into_view(self, image_url: String) -> DocImageView {
        DocImageView {
            id: self.id,
            rag_id: self.rag_id,
            document_id: self.document_id,
            chunk_id: self.chunk_id,
            resource_id: self.resource_id,
            image_index: self.image_index,
            image_url,
            caption: self.caption,
            figure_no: self.figure_no,
            figure_title: self.figure_title,
            section_title: self.section_title,
            document_name: self.document_name,
            ocr_text: self.ocr_text,
            source_page: self.source_page,
            create_dt: crate::time::datetime(self.create_dt),
            update_dt: crate::time::datetime(self.update_dt),
        }
    }
}

pub async fn image_key(db: &PgPool, id: i64) -> sqlx::Result<Option<(String, String, i64)>> {
    sqlx::query_as("SELECT storage_key, mime_type, rag_id FROM document_images WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// How long a document no worker holds may wait (never taken, or let go after a passing
/// failure): its message waits in the queue up to 7 days (behind a backlog the workers'
/// concurrency cap holds back), and is worked then.
const QUEUED_AT_MOST: std::time::Duration = std::time::Duration::from_secs(8 * 24 * 3600);

/// Marks failed the documents still in processing whose run stopped (its lease, or its last
/// change when no worker took it, is `older_than` old): the queue gave up on them. A document
/// no worker holds (never leased, or let go after a passing failure, its message back in the
/// queue) is given as long as the queue keeps that message; a run whose worker was killed
/// leaves its lease to run out. A new run id keeps a worker that wakes up late from writing.
/// Returns how many.
pub async fn fail_stalled(db: &PgPool, older_than: std::time::Duration) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "UPDATE documents SET error_stage = status, status = 'failed',
           error_message = 'processing stopped before it finished; reprocess the document',
           run_id = gen_random_uuid(), lease_until = NULL, updated_at = now()
         WHERE status NOT IN ('success', 'failed')
           AND COALESCE(lease_until, updated_at) < now() - make_interval(secs => CASE
                 WHEN lease_until IS NULL THEN $2 ELSE $1 END)",
    )
    .bind(older_than.as_secs_f64())
    .bind(QUEUED_AT_MOST.as_secs_f64())
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Removes a base's pending previews and their temporary resource rows in the caller's
/// transaction (the base is being deleted); returns the keys of their files, for the caller
/// to delete with the base's own.
pub async fn remove_previews_of(conn: &mut sqlx::PgConnection, rag_id: i64) -> sqlx::Result<Vec<String>> {
    let taken: Vec<sqlx::types::Json<Vec<StoredItem>>> =
        sqlx::query_scalar("DELETE FROM upload_previews WHERE rag_id = $1 RETURNING items")
            .bind(rag_id)
            .fetch_all(&mut *conn)
            .await?;
    let items: Vec<&StoredItem> = taken.iter().flat_map(|t| t.0.iter()).collect();
    let ids: Vec<i64> = items.iter().map(|s| s.item.temp_resource_id).collect();
    sqlx::query("DELETE FROM resources WHERE id = ANY($1)")
        .bind(&ids)
        .execute(&mut *conn)
        .await?;
    Ok(items.into_iter().map(|s| s.key.clone()).collect())
}
