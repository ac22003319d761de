//! Token quotas: regular users spend `tokens` until `expireDt`; administrators are not limited.

use sqlx::PgPool;

use crate::{AppError, AppResult};

/// Refuses a regular user whose quota is used up or expired, before any upstream call.
pub async fn ensure_available(db: &PgPool, user_id: i64) -> AppResult<()> {
    let row: Option<(i16, i64, bool)> =
        sqlx::query_as("SELECT role, tokens, COALESCE(expire_dt < now(), FALSE) FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_optional(db)
            .await?;
    let Some((role, tokens, expired)) = row else {
        return Err(AppError::unauthorized("the user no longer exists; please log in again"));
    };
    if role == 1 {
        return Ok(());
    }
    if expired {
        return Err(AppError::Forbidden(
            "your token quota has expired; ask an administrator to renew it".into(),
        ));
    }
    if tokens <= 0 {
        return Err(AppError::Forbidden(
            "your token quota is used up; ask an administrator for more".into(),
        ));
    }
    Ok(())
}

/// Deducts what a call used (never below zero; administrators keep their count).
pub async fn deduct(db: &PgPool, user_id: i64, tokens: u64) -> sqlx::Result<()> {
    if tokens == 0 {
        return Ok(());
    }
    sqlx::query("UPDATE users SET tokens = GREATEST(tokens - $2, 0) WHERE id = $1 AND role = 2")
        .bind(user_id)
        .bind(tokens as i64)
        .execute(db)
        .await?;
    Ok(())
}
