//! Login throttling per username and per client address, kept in Postgres so every function
//! instance sees the same counts.

use std::time::Duration;

use sqlx::PgPool;

use crate::AppError;

/// Refuses the attempt when any of `keys` is locked.
pub async fn check(db: &PgPool, keys: &[String]) -> Result<(), AppError> {
    let wait: Option<f64> = sqlx::query_scalar(
        "SELECT max(extract(epoch FROM locked_until - now()))::float8 FROM login_throttle
         WHERE key = ANY($1) AND locked_until > now()",
    )
    .bind(keys)
    .fetch_one(db)
    .await?;
    match wait {
        Some(secs) => Err(AppError::RateLimited {
            message: format!("too many failed logins; try again in {} seconds", secs.ceil() as u64),
            retry_after_secs: secs.ceil() as u64,
        }),
        None => Ok(()),
    }
}

/// Counts one failure for `key`; at `limit` failures within the lock period the key is locked
/// for that period.
pub async fn record_failure(db: &PgPool, key: &str, limit: i32, lock: Duration) -> Result<(), AppError> {
    let secs = lock.as_secs_f64();
    let failures: i32 = sqlx::query_scalar(
        "INSERT INTO login_throttle (key, failures, window_start) VALUES ($1, 1, now())
         ON CONFLICT (key) DO UPDATE SET
           failures = CASE WHEN login_throttle.window_start < now() - make_interval(secs => $2)
                           THEN 1 ELSE login_throttle.failures + 1 END,
           window_start = CASE WHEN login_throttle.window_start < now() - make_interval(secs => $2)
                           THEN now() ELSE login_throttle.window_start END
         RETURNING failures",
    )
    .bind(key)
    .bind(secs)
    .fetch_one(db)
    .await?;
    if failures >= limit {
        sqlx::query(
            "UPDATE login_throttle SET locked_until = now() + make_interval(secs => $2), failures = 0,
             window_start = now() WHERE key = $1",
        )
        .bind(key)
        .bind(secs)
        .execute(db)
        .await?;
    }
    Ok(())
}

pub async fn clear(db: &PgPool, key: &str) -> Result<(), AppError> {
    sqlx::query("DELETE FROM login_throttle WHERE key = $1")
        .bind(key)
        .execute(db)
        .await?;
    Ok(())
}

/// Deletes counters that no longer change an answer: not locked now, and with a window older
/// than the lock period (the next failure would start a new window anyway).
pub async fn purge_stale(db: &PgPool, lock: Duration) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM login_throttle
         WHERE (locked_until IS NULL OR locked_until <= now())
           AND window_start < now() - make_interval(secs => $1)",
    )
    .bind(lock.as_secs_f64())
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
