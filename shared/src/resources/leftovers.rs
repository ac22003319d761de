//! Objects no row names: those whose rows are gone, and those written ahead of the row that
//! will name them. A delete that fails (storage briefly unreachable) is noted, and the daily
//! housekeeping tries it again: a passing failure leaves no file in the bucket for good, where
//! logging it left it to whoever reads the logs. An object about to be written is noted too,
//! due a day later, and the statement storing its row takes the note back (`take_back`): a
//! request that ends between the two (a Lambda timeout, an answer lost after the commit)
//! leaves nothing the housekeeping does not find.

use bytes::Bytes;
use futures::StreamExt;
use sqlx::{PgConnection, PgPool};

use crate::storage::StorageError;
use crate::{AppResult, AppState};

/// The start of a statement that stores a row naming an object whose storage key is bound as
/// parameter `key_param`: the note `ahead` wrote goes with the row, in one statement.
pub fn take_back(key_param: u8) -> String {
    format!("WITH taken_back AS (DELETE FROM leftover_objects WHERE storage_key = ${key_param})")
}

/// Notes `key` before its object is written, due for deletion a day later: longer than any
/// request lives, so an object whose row is still on its way is never taken.
pub async fn ahead(db: &PgPool, key: &str) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO leftover_objects (storage_key, due_at) VALUES ($1, now() + interval '1 day')
         ON CONFLICT (storage_key) DO UPDATE SET due_at = GREATEST(leftover_objects.due_at, EXCLUDED.due_at)",
    )
    .bind(key)
    .execute(db)
    .await
    .map(|_| ())
}

/// Takes back the note of `key`: a stored row names it, or its object is gone.
pub async fn named(db: &PgPool, key: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM leftover_objects WHERE storage_key = $1")
        .bind(key)
        .execute(db)
        .await
        .map(|_| ())
}

/// Writes an object ahead of the row that will name it; a write that fails leaves nothing
/// behind, unless it may have stored the object after all.
pub async fn put_ahead(state: &AppState, key: &str, bytes: Bytes, mime: &str) -> AppResult<()> {
    ahead(state.db(), key).await?;
    if let Err(e) = state.storage().put(key, bytes, mime).await {
        let certain = !matches!(e, StorageError::Unavailable(_) | StorageError::Other(_));
        unnamed(state, key, certain).await;
        return Err(e.into());
    }
    Ok(())
}

/// An object written ahead of a row that was not stored. When nothing can have been stored
/// (`certain`), the object and its note go now, leaving storage and the table as they were;
/// otherwise (a lost answer: the row may be stored, and then took the note back) both stay
/// for the housekeeping.
pub async fn unnamed(state: &AppState, key: &str, certain: bool) {
    if !certain {
        tracing::warn!(%key, "an object's row may not have been stored; housekeeping deletes it in a day if not");
        return;
    }
    delete_now(state, key).await;
}

/// Whether a failed statement certainly wrote nothing: the database refused it (an error of
/// its own, not the connection ending under it) or it never reached the database. Anything
/// else (a lost connection, a result that could not be read) may have come after the commit.
pub fn certain(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => !db.code().is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Configuration(_)
        | sqlx::Error::Encode(_) => true,
        _ => false,
    }
}

/// Objects read and deleted at a time by a housekeeping run.
const RETRY_BATCH: i64 = 1000;
/// How long a housekeeping run goes on taking batches (of its 300 s): one deleted base or app
/// can leave tens of thousands of files, which a batch a day took weeks to clear, in front of
/// every later file whose delete failed.
const RETRY_BUDGET: std::time::Duration = std::time::Duration::from_secs(120);

/// Notes objects that the transaction `tx` stops naming, due now: deleted once it commits
/// (`delete` takes the notes back), they are left to the housekeeping by a request that ends
/// between the two (a Lambda timeout, an answer lost after the commit).
pub async fn going(tx: &mut PgConnection, keys: &[String]) -> sqlx::Result<()> {
    sqlx::query(DUE_NOW).bind(keys).execute(tx).await.map(|_| ())
}

/// Notes the keys `$1` due now, or makes their notes due now.
const DUE_NOW: &str = "INSERT INTO leftover_objects (storage_key) SELECT unnest($1::text[])
    ON CONFLICT (storage_key) DO UPDATE SET due_at = LEAST(leftover_objects.due_at, now())";

/// Objects deleted at once where many go: an app's or a base's may be thousands, and one by
/// one at S3's tens of milliseconds each they outlast a request or the housekeeping's run.
pub const DELETES_AT_ONCE: usize = 8;

/// Deletes objects no row names any more (`DELETES_AT_ONCE` at a time), taking back their
/// notes (`going`); one that cannot be deleted now is noted for the housekeeping to delete
/// later.
pub async fn delete(state: &AppState, keys: &[String]) {
    futures::stream::iter(keys)
        .for_each_concurrent(DELETES_AT_ONCE, |key| delete_now(state, key))
        .await;
}

/// Deletes the object and takes its note back; when the delete fails, its note is due now for
/// the housekeeping.
async fn delete_now(state: &AppState, key: &str) {
    let outcome = match state.storage().delete(key).await {
        Ok(()) => named(state.db(), key).await,
        Err(e) => {
            tracing::warn!(%key, error = %e, "an object delete failed; housekeeping deletes it later");
            sqlx::query(DUE_NOW).bind([key]).execute(state.db()).await.map(|_| ())
        }
    };
    if let Err(e) = outcome {
        tracing::error!(%key, error = %e, "an object's note was not updated");
    }
}

/// Deletes a noted object, then its note.
async fn delete_noted(state: AppState, key: String) -> AppResult<()> {
    state.storage().delete(&key).await?;
    named(state.db(), &key).await?;
    Ok(())
}

/// A row of one of the tables that keep storage keys names the noted key.
const NAMED: &str = "EXISTS (SELECT 1 FROM resources r WHERE r.storage_key = l.storage_key)
    OR EXISTS (SELECT 1 FROM skills s WHERE s.storage_key = l.storage_key)
    OR EXISTS (SELECT 1 FROM documents d WHERE d.storage_key = l.storage_key)
    OR EXISTS (SELECT 1 FROM document_images i WHERE i.storage_key = l.storage_key)";

/// Deletes the noted objects that are due; returns how many went. Those that fail again stay
/// noted, and the run reports the failure. A due note whose key a row names after all (a
/// completion retried while the first one was saving wrote its note after that row took its
/// own back) is dropped, its object kept: the check is what makes a note safe to act on.
pub async fn retry(state: &AppState) -> AppResult<u64> {
    retry_in(state, RETRY_BATCH, RETRY_BUDGET).await
}

/// `retry`, `batch` objects at a time until none is due or `budget` is spent. A batch with a
/// failure ends the run: the store is failing, and the failed notes, still due, would be read
/// again first.
pub async fn retry_in(state: &AppState, batch: i64, budget: std::time::Duration) -> AppResult<u64> {
    let started = std::time::Instant::now();
    let mut deleted = 0;
    loop {
        let (went, read) = retry_batch(state, batch).await?;
        deleted += went;
        if read < batch as usize || started.elapsed() >= budget {
            return Ok(deleted);
        }
    }
}

/// One batch of `retry`: how many objects went, and how many were read.
async fn retry_batch(state: &AppState, batch: i64) -> AppResult<(u64, usize)> {
    let kept = sqlx::query(&format!(
        "DELETE FROM leftover_objects l WHERE l.due_at <= now() AND ({NAMED})"
    ))
    .execute(state.db())
    .await?
    .rows_affected();
    if kept > 0 {
        tracing::warn!(kept, "notes of objects that rows name were dropped, their objects kept");
    }
    let keys: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT l.storage_key FROM leftover_objects l WHERE l.due_at <= now() AND NOT ({NAMED})
         ORDER BY l.due_at LIMIT $1"
    ))
    .bind(batch)
    .fetch_all(state.db())
    .await?;
    let read = keys.len();
    // Owned: a stream of futures borrowing the state is not `Send` for every lifetime the
    // scheduled job's boxed future asks of it (a compiler limit).
    let owned = state.clone();
    let outcomes: Vec<AppResult<()>> = futures::stream::iter(keys)
        .map(move |key| delete_noted(owned.clone(), key))
        .buffer_unordered(DELETES_AT_ONCE)
        .collect()
        .await;
    let deleted = outcomes.iter().filter(|o| o.is_ok()).count() as u64;
    match outcomes.into_iter().find_map(Result::err) {
        Some(e) => Err(e),
        None => Ok((deleted, read)),
    }
}
