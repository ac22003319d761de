//! Two-step upload: preview (store the files as temporary resources, report duplicates),
//! then commit (create documents for NEW / OVERWRITE) or cancel.

use std::time::Duration;

use futures::StreamExt;

use super::dedup::{self, Conflict, Decision};
use super::repo::{self as doc_repo, NewDoc};
use super::*;
use crate::domain::CurrentUser;
use crate::domain::UploadedFile;
use crate::rag::backends::{chunk_ids_of, remove_replaced};
use crate::rag::bases::{self, KbRow};
use crate::rag::parse::FileType;
use crate::resources::leftovers;
use crate::resources::repo::{self as res_repo, NewResource};
use crate::resources::service::{clean_file_name, sniff_mime};
use crate::resources::{ResourceRow, DOCUMENT_BIZ_TYPE, KB_PREVIEW_BIZ_TYPE};
use crate::storage::ByteRange;
use crate::{AppError, AppResult, AppState};
use sqlx::PgConnection;

const PREVIEW_TTL: Duration = Duration::from_secs(3600);
pub const MAX_FILES: usize = 20;

/// Options a preview request may override.
pub struct PreviewOptions {
    pub dedup_strategy: Option<i64>,
    pub dedup_action: Option<i64>,
}

fn resolve_dedup(kb: &KbRow, o: &PreviewOptions) -> AppResult<(i16, i16)> {
    let strategy = o.dedup_strategy.unwrap_or(i64::from(kb.dedup_strategy));
    crate::validate::range("dedupStrategy", strategy, 0, 3)?;
    let action = o.dedup_action.unwrap_or(i64::from(kb.dedup_action));
    crate::validate::range("dedupAction", action, 0, 2)?;
    Ok((strategy as i16, action as i16))
}

/// Decides every file against the base and against the files before it in the same upload,
/// reading the base on `conn` (a commit's transaction: on a pooled connection of its own, each
/// commit held two at once).
async fn decide_all(
    conn: &mut PgConnection,
    kb: &KbRow,
    strategy: i16,
    action: i16,
    items: &mut [StoredItem],
) -> AppResult<()> {
    for i in 0..items.len() {
        let (earlier, rest) = items.split_at_mut(i);
        let item = &mut rest[0].item;
        if item.decision == Decision::Reject
            && item
                .reject_reason
                .as_deref()
                .is_some_and(|r| r.starts_with("unsupported"))
        {
            continue;
        }
        let (by_name, by_content) = doc_repo::conflicts(&mut *conn, kb.id, &item.file_name, &item.content_hash).await?;
        let in_upload = |same: &dyn Fn(&PreviewItem) -> bool| {
            earlier
                .iter()
                .find(|e| e.item.decision != Decision::Reject && same(&e.item))
                .map(|e| Conflict {
                    id: None,
                    name: e.item.file_name.clone(),
                })
        };
        // A file like an earlier one of the same upload is that file's duplicate first, whatever
        // the base holds: two copies of a document's content would both overwrite it, and two
        // new documents take its place.
        // Folded beyond ASCII, as Postgres' lower() does under a UTF-8 locale (RDS's default):
        // folded less than the stored names are, "Ä.txt" and "ä.txt" both overwrote "ä.txt".
        // A stored document an earlier file of the upload overwrites (matched by name, where
        // this one matches it by content, say) is that file's: overwritten by both, it would
        // leave two documents in its place.
        let stored = |(id, name): (i64, String)| {
            in_upload(&|e| e.decision == Decision::Overwrite && e.conflict_document_id == Some(id))
                .unwrap_or(Conflict { id: Some(id), name })
        };
        let by_name =
            in_upload(&|e| e.file_name.to_lowercase() == item.file_name.to_lowercase()).or_else(|| by_name.map(stored));
        let by_content = in_upload(&|e| e.content_hash == item.content_hash).or_else(|| by_content.map(stored));
        let outcome = dedup::decide(strategy, action, by_name, by_content);
        item.decision = outcome.decision;
        item.match_type = outcome.match_type;
        item.conflict_document_id = outcome.conflict.as_ref().and_then(|c| c.id);
        item.conflict_document_name = outcome.conflict.map(|c| c.name);
        item.reject_reason = outcome.reject_reason;
    }
    Ok(())
}

pub async fn preview(
    state: &AppState,
    user: &CurrentUser,
    rag_id: i64,
    files: Vec<UploadedFile>,
    options: PreviewOptions,
) -> AppResult<PreviewResult> {
    let kb = bases::service::owned(state, user, rag_id).await?;
    if files.is_empty() {
        return Err(AppError::validation("files is required"));
    }
    if files.len() > MAX_FILES {
        return Err(AppError::validation(format!(
            "files: at most {MAX_FILES} files per upload"
        )));
    }
    let (strategy, action) = resolve_dedup(&kb, &options)?;
    if let Err(e) = expire(state, EXPIRE_IN_PASSING).await {
        tracing::warn!(error = ?e, "expiring upload previews failed");
    }
    let mut items: Vec<StoredItem> = Vec::with_capacity(files.len());
    let outcome = store_files(state, user, &kb, files, &mut items).await;
    let outcome = match outcome {
        // Not `?`: the stored files are removed below whatever failed.
        Ok(()) => match state.db().acquire().await {
            Ok(mut conn) => decide_all(&mut conn, &kb, strategy, action, &mut items).await,
            Err(e) => Err(e.into()),
        },
        Err(e) => Err(e),
    };
    let token = uuid::Uuid::new_v4().simple().to_string();
    let saved = match outcome {
        Ok(()) => save_preview(state.db(), &token, &kb, user, (strategy, action), &items).await,
        Err(e) => Err(e),
    };
    if let Err(e) = saved {
        if let Err(cleanup) = discard_pooled(state, &items).await {
            tracing::error!(error = ?cleanup, "temporary uploads of a failed preview were left behind");
        }
        return Err(e);
    }
    Ok(PreviewResult {
        preview_token: token,
        rag_id,
        items: items.into_iter().map(|s| s.item).collect(),
    })
}

/// Step one of an upload for files already stored as the caller's resources (`bizType`
/// document, sent through a presigned PUT): the same verdicts as `preview`, and the files move
/// into the preview. Any refusal moves none of them.
pub async fn preview_resources(
    state: &AppState,
    user: &CurrentUser,
    req: PreviewResourcesRequest,
) -> AppResult<PreviewResult> {
    let rag_id = crate::validate::present("ragId", req.rag_id)?;
    let ids = crate::validate::present("resourceIds", req.resource_ids)?;
    if ids.is_empty() {
        return Err(AppError::validation("resourceIds is required"));
    }
    if ids.len() > MAX_FILES {
        return Err(AppError::validation(format!(
            "resourceIds: at most {MAX_FILES} files per upload"
        )));
    }
    if let Some(i) = (1..ids.len()).find(|&i| ids[..i].contains(&ids[i])) {
        return Err(AppError::validation(format!(
            "resourceIds[{i}]: resource {} is listed twice",
            ids[i]
        )));
    }
    let kb = bases::service::owned(state, user, rag_id).await?;
    let options = PreviewOptions {
        dedup_strategy: req.dedup_strategy,
        dedup_action: req.dedup_action,
    };
    let (strategy, action) = resolve_dedup(&kb, &options)?;
    let max = state.config().max_upload_bytes;
    let mut items = Vec::with_capacity(ids.len());
    for (i, &id) in ids.iter().enumerate() {
        let row = res_repo::find_own_upload(state.db(), id, user.id)
            .await?
            .ok_or_else(|| AppError::not_found("resource"))?;
        check_document_upload(i, &row)?;
        if row.file_size as u64 > max {
            return Err(AppError::PayloadTooLarge(format!(
                "resourceIds[{i}]: {} exceeds the limit of {max} bytes for a document",
                row.original_name
            )));
        }
        // Completed presigned uploads have none: their bytes never passed through the service.
        // Read up to the size checked above, whatever the store holds.
        let hash = match row.content_hash {
            Some(hash) => hash,
            None => {
                let range = (row.file_size > 0).then(|| ByteRange {
                    start: 0,
                    end: row.file_size as u64 - 1,
                });
                crate::crypto::content_hash(&crate::storage::read_all(state.storage(), &row.storage_key, range).await?)
            }
        };
        items.push(stored_item(
            id,
            row.original_name,
            row.file_size,
            hash,
            row.storage_key,
            row.mime_type,
        ));
    }
    decide_all(&mut *state.db().acquire().await?, &kb, strategy, action, &mut items).await?;
    let token = uuid::Uuid::new_v4().simple().to_string();
    let mut tx = state.db().begin().await?;
    // Read again under the rows' locks, a preview made meanwhile may have taken one; locked in
    // one statement, in id order: [a, b] and [b, a] locked one by one waited for each other.
    let locked = res_repo::lock_own_uploads(&mut *tx, &ids, user.id).await?;
    for (at, stored) in items.iter().enumerate() {
        let id = stored.item.temp_resource_id;
        let row = locked
            .iter()
            .find(|row| row.id == id)
            .ok_or_else(|| AppError::not_found("resource"))?;
        check_document_upload(at, row)?;
        res_repo::move_to_preview(&mut *tx, id, kb.id, &stored.item.content_hash).await?;
    }
    save_preview(&mut *tx, &token, &kb, user, (strategy, action), &items).await?;
    tx.commit().await?;
    Ok(PreviewResult {
        preview_token: token,
        rag_id,
        items: items.into_iter().map(|s| s.item).collect(),
    })
}

/// Whether the caller's own upload `row`, listed at `at`, may move into a preview: one made for
/// documents, in no preview yet.
fn check_document_upload(at: usize, row: &ResourceRow) -> AppResult<()> {
    let id = row.id;
    let biz_type = row.biz_type.as_deref().unwrap_or_default();
    if biz_type == KB_PREVIEW_BIZ_TYPE {
        return Err(AppError::validation(format!(
            "resourceIds[{at}]: resource {id} is already part of an upload preview"
        )));
    }
    if !biz_type.eq_ignore_ascii_case(DOCUMENT_BIZ_TYPE) {
        return Err(AppError::validation(format!(
            "resourceIds[{at}]: resource {id} was not uploaded for documents: upload it with bizType {DOCUMENT_BIZ_TYPE}"
        )));
    }
    Ok(())
}

async fn save_preview(
    db: impl sqlx::PgExecutor<'_>,
    token: &str,
    kb: &KbRow,
    user: &CurrentUser,
    (strategy, action): (i16, i16),
    items: &[StoredItem],
) -> AppResult<()> {
    let json = serde_json::to_value(items).map_err(|e| AppError::Internal(e.into()))?;
    sqlx::query(
        "INSERT INTO upload_previews (token, rag_id, creator_id, items, expires_at, dedup_strategy, dedup_action)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(token)
    .bind(kb.id)
    .bind(user.id)
    .bind(json)
    .bind(chrono::Utc::now() + PREVIEW_TTL)
    .bind(strategy)
    .bind(action)
    .execute(db)
    .await?;
    Ok(())
}

/// Stores each file as a temporary resource; on failure what was stored so far stays listed
/// in `items` for the caller to discard.
async fn store_files(
    state: &AppState,
    user: &CurrentUser,
    kb: &KbRow,
    files: Vec<UploadedFile>,
    items: &mut Vec<StoredItem>,
) -> AppResult<()> {
    for file in files {
        let name = clean_file_name(&file.file_name);
        let mime = sniff_mime(&file.bytes, &name);
        let hash = crate::crypto::content_hash(&file.bytes);
        let size = file.bytes.len() as i64;
        let key = format!("rag/{}/uploads/{}", kb.id, uuid::Uuid::new_v4().simple());
        leftovers::put_ahead(state, &key, file.bytes, &mime).await?;
        let resource = res_repo::insert(
            state.db(),
            &NewResource {
                storage_key: &key,
                original_name: &name,
                file_size: size,
                mime_type: &mime,
                storage_type: state.storage().kind().as_str(),
                biz_type: Some(KB_PREVIEW_BIZ_TYPE),
                biz_id: Some(kb.id),
                content_hash: Some(&hash),
                creator_id: user.id,
            },
        )
        .await;
        let resource = match resource {
            Ok(r) => r,
            Err(e) => {
                leftovers::unnamed(state, &key, leftovers::certain(&e)).await;
                return Err(e.into());
            }
        };
        items.push(stored_item(resource.id, name, size, hash, key, mime));
    }
    Ok(())
}

/// A preview's file, stored under `key` as resource `id`: NEW until decided, unless the base
/// cannot read its type.
fn stored_item(id: i64, name: String, size: i64, hash: String, key: String, mime: String) -> StoredItem {
    let file_type = FileType::from_name(&name);
    let unsupported = file_type.is_none().then(|| {
        let ext = std::path::Path::new(&name)
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("(none)");
        format!("unsupported file type .{ext}: use pdf, docx, xlsx, csv, md, txt or html")
    });
    StoredItem {
        item: PreviewItem {
            temp_resource_id: id,
            file_name: name,
            file_type: file_type.map(|t| t.as_str().to_owned()).unwrap_or_default(),
            file_size: size,
            content_hash: hash,
            decision: if unsupported.is_some() {
                Decision::Reject
            } else {
                Decision::New
            },
            match_type: dedup::MatchType::None,
            conflict_document_id: None,
            conflict_document_name: None,
            reject_reason: unsupported,
        },
        key,
        mime,
    }
}

/// `discard` outside a transaction: the connection is taken once the files are gone, for the
/// one statement that removes their rows.
async fn discard_pooled(state: &AppState, items: &[StoredItem]) -> AppResult<()> {
    let (gone, outcome) = delete_files(state, items).await;
    forget_rows(&mut *state.db().acquire().await?, &gone).await?;
    outcome
}

/// Removes temporary files, then on `conn` (the caller's transaction, which holds the
/// previews) the resource rows of those that are gone: a delete of its own per file took a
/// pooled connection each while the transaction held another, up to nine per request. Fails
/// when any file could not be deleted: those keep their rows, for whoever tries again to find.
async fn discard(state: &AppState, conn: &mut PgConnection, items: &[StoredItem]) -> AppResult<()> {
    let (gone, outcome) = delete_files(state, items).await;
    forget_rows(conn, &gone).await?;
    outcome
}

/// Deletes the files (`DELETES_AT_ONCE` at a time); returns the resource ids of those deleted
/// and the first failure.
async fn delete_files(state: &AppState, items: &[StoredItem]) -> (Vec<i64>, AppResult<()>) {
    // Owned, as in `leftovers::retry`.
    let owned = state.clone();
    let files: Vec<(String, i64)> = items.iter().map(|s| (s.key.clone(), s.item.temp_resource_id)).collect();
    let outcomes: Vec<(i64, AppResult<()>)> = futures::stream::iter(files)
        .map(move |(key, id)| {
            let state = owned.clone();
            async move { (id, state.storage().delete(&key).await.map_err(AppError::from)) }
        })
        .buffer_unordered(leftovers::DELETES_AT_ONCE)
        .collect()
        .await;
    let gone = outcomes.iter().filter(|(_, r)| r.is_ok()).map(|(id, _)| *id).collect();
    (gone, outcomes.into_iter().try_for_each(|(_, r)| r))
}

async fn forget_rows(conn: &mut PgConnection, resource_ids: &[i64]) -> AppResult<()> {
    sqlx::query("DELETE FROM resources WHERE id = ANY($1)")
        .bind(resource_ids)
        .execute(conn)
        .await?;
    Ok(())
}

/// Previews one run of the daily expiry takes on; the next run takes the rest.
const EXPIRE_BATCH: i64 = 500;

/// Previews a new preview expires on its way: a few, so that abandoned ones go sooner than the
/// daily run without someone's upload paying for hundreds of file deletes (API Gateway ends a
/// request after 29 s).
const EXPIRE_IN_PASSING: i64 = 5;

/// The daily expiry of previews (see `expire`).
pub async fn expire_previews(state: &AppState) -> AppResult<usize> {
    expire(state, EXPIRE_BATCH).await
}

/// Deletes the temporary files of previews that were never saved: a request that ended
/// between storing its files and its preview (a Lambda timeout), or whose clean-up failed,
/// left rows no preview names, which nothing else reaches (the resource API refuses them).
/// Older than a day, they are past any preview's hour; that includes a resource moved into a
/// preview (its own key) whose base was deleted meanwhile. Returns how many.
/// The files are noted in the statement that deletes their rows; the housekeeping's retry of
/// noted objects, which runs after this, deletes them.
pub async fn sweep_unsaved(state: &AppState) -> AppResult<u64> {
    let swept = sqlx::query(
        "WITH gone AS (
           DELETE FROM resources WHERE id IN (
             SELECT r.id FROM resources r
             WHERE r.biz_type = $1
               AND r.create_dt < now() - interval '1 day'
               AND NOT EXISTS (SELECT 1 FROM upload_previews p
                               WHERE p.items @> jsonb_build_array(jsonb_build_object('key', r.storage_key)))
             ORDER BY r.id LIMIT $2)
           RETURNING storage_key)
         INSERT INTO leftover_objects (storage_key) SELECT storage_key FROM gone ON CONFLICT DO NOTHING",
    )
    .bind(KB_PREVIEW_BIZ_TYPE)
    .bind(EXPIRE_BATCH)
    .execute(state.db())
    .await?;
    Ok(swept.rows_affected())
}

/// Deletes up to `limit` expired previews and their temporary files; returns how many
/// previews. A preview's row goes only once all its files have: one whose files could not all
/// be deleted stays, and the next run tries it again. Previews a commit holds are left to it.
async fn expire(state: &AppState, limit: i64) -> AppResult<usize> {
    let mut tx = state.db().begin().await?;
    let expired: Vec<(String, sqlx::types::Json<Vec<StoredItem>>)> = sqlx::query_as(
        "SELECT token, items FROM upload_previews WHERE expires_at < now()
         ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    let mut removed = Vec::with_capacity(expired.len());
    let mut failure = None;
    for (token, items) in expired {
        match discard(state, &mut tx, &items.0).await {
            Ok(()) => removed.push(token),
            Err(e) => failure = Some(e),
        }
    }
    sqlx::query("DELETE FROM upload_previews WHERE token = ANY($1)")
        .bind(&removed)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    match failure {
        Some(e) => Err(e),
        None => Ok(removed.len()),
    }
}

struct Preview {
    rag_id: i64,
    creator_id: i64,
    items: Vec<StoredItem>,
    /// The dedup strategy and action the preview decided with; `None` for previews made
    /// before they were stored.
    rules: Option<(i16, i16)>,
}

async fn load_preview(conn: &mut sqlx::PgConnection, user: &CurrentUser, token: &str) -> AppResult<Preview> {
    type Row = (i64, i64, sqlx::types::Json<Vec<StoredItem>>, Option<i16>, Option<i16>);
    let row: Option<Row> = sqlx::query_as(
        "SELECT rag_id, creator_id, items, dedup_strategy, dedup_action FROM upload_previews
         WHERE token = $1 AND expires_at > now() FOR UPDATE",
    )
    .bind(token)
    .fetch_optional(&mut *conn)
    .await?;
    let (rag_id, creator_id, items, strategy, action) =
        row.ok_or_else(|| AppError::NotFound("previewToken not found or expired; upload the files again".into()))?;
    if !user.can_manage(creator_id) {
        return Err(AppError::NotFound(
            "previewToken not found or expired; upload the files again".into(),
        ));
    }
    Ok(Preview {
        rag_id,
        creator_id,
        items: items.0,
        rules: strategy.zip(action),
    })
}

pub async fn cancel(state: &AppState, user: &CurrentUser, token: &str) -> AppResult<()> {
    let mut tx = state.db().begin().await?;
    let preview = load_preview(&mut tx, user, token).await?;
    // Expired at once, so it can no longer be committed; its files go now, or with the
    // expiry of previews when one of them cannot be deleted now.
    sqlx::query("UPDATE upload_previews SET expires_at = now() - interval '1 second' WHERE token = $1")
        .bind(token)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    match discard_pooled(state, &preview.items).await {
        Ok(()) => {
            sqlx::query("DELETE FROM upload_previews WHERE token = $1")
                .bind(token)
                .execute(state.db())
                .await?;
        }
        Err(e) => tracing::warn!(error = ?e, "a cancelled upload's files are left to the expiry of previews"),
    }
    Ok(())
}

fn parse_decision(i: usize, value: Option<String>) -> AppResult<Decision> {
    match value.as_deref().map(|d| d.trim().to_ascii_uppercase()).as_deref() {
        Some("NEW") => Ok(Decision::New),
        Some("SKIP") => Ok(Decision::Skip),
        Some("OVERWRITE") => Ok(Decision::Overwrite),
        Some(_) => Err(AppError::validation(format!(
            "items[{i}].decision must be NEW, SKIP or OVERWRITE"
        ))),
        None => Err(AppError::validation(format!("items[{i}].decision is required"))),
    }
}

pub async fn commit(state: &AppState, user: &CurrentUser, req: CommitRequest) -> AppResult<CommitResult> {
    let token = crate::validate::required("previewToken", req.preview_token)?;
    let requested = crate::validate::present("items", req.items)?;
    let mut choices = Vec::with_capacity(requested.len());
    for (i, c) in requested.into_iter().enumerate() {
        let id = c
            .temp_resource_id
            .ok_or_else(|| AppError::validation(format!("items[{i}].tempResourceId is required")))?;
        choices.push((i, id, parse_decision(i, c.decision)?));
    }

    let mut tx = state.db().begin().await?;
    let preview = load_preview(&mut tx, user, &token).await?;
    // Before deciding again: a commit of the same base running meanwhile is decided against
    // once it is committed, or two copies of one file could both pass as new.
    doc_repo::lock_additions(&mut tx, preview.rag_id).await?;
    let kb = bases::repo::find(&mut *tx, preview.rag_id)
        .await?
        .ok_or_else(|| AppError::not_found("knowledge base"))?;
    for (i, id, _) in &choices {
        if !preview.items.iter().any(|s| s.item.temp_resource_id == *id) {
            return Err(AppError::validation(format!(
                "items[{i}].tempResourceId {id} is not part of this preview"
            )));
        }
    }
    // Decide again against the base as it is now, by the rules the preview was made with: if
    // another upload or delete changed a match, the client must confirm the new picture.
    let mut fresh = preview.items.clone();
    let (strategy, action) = preview.rules.unwrap_or((kb.dedup_strategy, kb.dedup_action));
    decide_all(&mut tx, &kb, strategy, action, &mut fresh).await?;
    let changed = fresh.iter().zip(&preview.items).any(|(a, b)| {
        (a.item.match_type, a.item.conflict_document_id) != (b.item.match_type, b.item.conflict_document_id)
    });
    if changed {
        let json = serde_json::to_value(&fresh).map_err(|e| AppError::Internal(e.into()))?;
        sqlx::query("UPDATE upload_previews SET items = $2 WHERE token = $1")
            .bind(&token)
            .bind(json)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        let items = fresh.iter().map(|s| uncommitted(&s.item, s.item.decision)).collect();
        return Ok(CommitResult {
            conflict_changed: true,
            items,
        });
    }

    // The decision for each previewed item and the index of the request's choice.
    let chosen = |temp_resource_id: i64| {
        let c = choices.iter().find(|(_, id, _)| *id == temp_resource_id);
        (
            c.map(|c| c.2).unwrap_or(Decision::Skip),
            c.map(|c| c.0).unwrap_or_default(),
        )
    };
    // Every choice is checked before anything is written: removals from an external store
    // (Milvus, OpenSearch) are not undone when the transaction rolls back.
    for stored in &preview.items {
        let item = &stored.item;
        let (decision, index) = chosen(item.temp_resource_id);
        if decision != Decision::Skip && item.decision == Decision::Reject {
            return Err(AppError::validation(format!(
                "items[{index}]: {} was rejected: {}",
                item.file_name,
                item.reject_reason.clone().unwrap_or_default()
            )));
        }
        if decision == Decision::Overwrite && item.conflict_document_id.is_none() {
            return Err(AppError::validation(format!(
                "items[{index}]: {} has no existing document to overwrite",
                item.file_name
            )));
        }
    }

    let mut results = Vec::new();
    let mut queued = Vec::new();
    let mut drop_keys = Vec::new();
    let mut replaced_chunks = Vec::new();
    for stored in &preview.items {
        let item = &stored.item;
        let (decision, _) = chosen(item.temp_resource_id);
        sqlx::query("DELETE FROM resources WHERE id = $1")
            .bind(item.temp_resource_id)
            .execute(&mut *tx)
            .await?;
        if decision == Decision::Skip {
            drop_keys.push(stored.key.clone());
            results.push(uncommitted(item, decision));
            continue;
        }
        if decision == Decision::Overwrite {
            if let Some(old) = item.conflict_document_id {
                drop_keys.extend(doc_repo::object_keys(&mut tx, old).await?);
                replaced_chunks.extend(chunk_ids_of(&mut tx, &[old]).await?);
                doc_repo::delete(&mut *tx, old).await?;
            }
        }
        let (id, run_id) = doc_repo::insert(
            &mut *tx,
            &NewDoc {
                rag_id: kb.id,
                name: &item.file_name,
                file_type: &item.file_type,
                source_type: "local",
                source_path: &item.file_name,
                storage_key: &stored.key,
                mime_type: &stored.mime,
                file_size: item.file_size,
                content_hash: &item.content_hash,
                creator_id: preview.creator_id,
            },
        )
        .await?;
        queued.push((id, run_id));
        results.push(CommittedItem {
            id: Some(id),
            rag_id: Some(kb.id),
            name: item.file_name.clone(),
            file_type: Some(item.file_type.clone()),
            decision,
            match_type: item.match_type,
        });
    }
    sqlx::query("DELETE FROM upload_previews WHERE token = $1")
        .bind(&token)
        .execute(&mut *tx)
        .await?;
    crate::resources::leftovers::going(&mut tx, &drop_keys).await?;
    // Last before the commit, once every statement that could refuse it has run: a removal
    // from an external store (Milvus, OpenSearch) is not undone by a rollback.
    remove_replaced(state, &kb, &mut tx, &replaced_chunks).await?;
    tx.commit().await?;

    // Queued before the files are deleted: a request that ends during those deletes (a
    // function's time up, a client gone) leaves files to the housekeeping, not documents that
    // wait for a message nobody sent.
    for (id, run_id) in queued {
        crate::rag::pipeline::enqueue(state, id, run_id, preview.creator_id).await;
    }
    crate::resources::leftovers::delete(state, &drop_keys).await;
    Ok(CommitResult {
        conflict_changed: false,
        items: results,
    })
}

fn uncommitted(item: &PreviewItem, decision: Decision) -> CommittedItem {
    CommittedItem {
        id: None,
        rag_id: None,
        name: item.file_name.clone(),
        file_type: (!item.file_type.is_empty()).then(|| item.file_type.clone()),
        decision,
        match_type: item.match_type,
    }
}
