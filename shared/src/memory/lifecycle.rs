//! Expiry: ACTIVE memories unused for longer than their agent's `memoryExpirationDays` are
//! archived. Run daily by the housekeeping function.

use sqlx::PgPool;

/// Archives every expired memory; returns how many. "Unused" counts from the later of the
/// last change and the last recall, so a memory that keeps being recalled never expires.
/// Agents without a config, or whose config has no `memoryExpirationDays`, keep memories.
pub async fn archive_expired(db: &PgPool) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "UPDATE memories m SET status = 'ARCHIVED', update_dt = now()
         FROM agents a JOIN memory_configs c ON c.id = a.memory_config_id
         WHERE m.agent_id = a.id AND m.status = 'ACTIVE' AND c.memory_expiration_days IS NOT NULL
           AND GREATEST(m.update_dt, COALESCE(m.accessed_at, m.update_dt))
               < now() - make_interval(days => c.memory_expiration_days)",
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
