//! Objects whose rows are already gone. A delete that fails (storage briefly unreachable) is
//! noted, and the daily housekeeping tries it again: a passing failure leaves no file in the
//! bucket for good, where logging it left it to whoever reads the logs.

use crate::{AppResult, AppState};

/// Objects one housekeeping run tries; the next run takes the rest.
const RETRY_BATCH: i64 = 1000;

/// Deletes objects no row names any more; one that cannot be deleted now is noted for the
/// housekeeping to delete later.
pub async fn delete(state: &AppState, keys: &[String]) {
    for key in keys {
        if let Err(e) = state.storage().delete(key).await {
            tracing::warn!(%key, error = %e, "an object delete failed; housekeeping deletes it later");
            let noted = sqlx::query("INSERT INTO leftover_objects (storage_key) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(key)
                .execute(state.db())
                .await;
            if let Err(e) = noted {
                tracing::error!(%key, error = %e, "an object no row names was left in storage");
            }
        }
    }
}

/// Deletes the noted objects; returns how many went. Those that fail again stay noted, and
/// the run reports the failure.
pub async fn retry(state: &AppState) -> AppResult<u64> {
    let keys: Vec<String> = sqlx::query_scalar("SELECT storage_key FROM leftover_objects ORDER BY noted_at LIMIT $1")
        .bind(RETRY_BATCH)
        .fetch_all(state.db())
        .await?;
    let mut deleted = 0;
    let mut failure = None;
    for key in keys {
        match state.storage().delete(&key).await {
            Ok(()) => {
                sqlx::query("DELETE FROM leftover_objects WHERE storage_key = $1")
                    .bind(&key)
                    .execute(state.db())
                    .await?;
                deleted += 1;
            }
            Err(e) => failure = Some(e),
        }
    }
    match failure {
        Some(e) => Err(e.into()),
        None => Ok(deleted),
    }
}
