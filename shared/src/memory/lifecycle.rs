//! Expiry: ACTIVE memories unused for longer than their agent's `memoryExpirationDays` are
//! archived. Run daily by the housekeeping function.

use std::time::{Duration, Instant};

use sqlx::PgPool;

/// Memories archived per statement. An archived row changes every index of the table, the
/// vector indexes included: in one statement, a million memories expiring at once (an agent's
/// config given an expiry) ran past the housekeeping function's time limit, and took the jobs
/// after it along.
const BATCH: i64 = 5_000;
/// How long one run archives; what is left is archived by the next day's.
const BUDGET: Duration = Duration::from_secs(60);

/// An expired memory of `m`, its agent `a` and config `c`: unused for longer than its
/// config's `memoryExpirationDays`.
const EXPIRED: &str = "m.status = 'ACTIVE' AND c.memory_expiration_days IS NOT NULL
    AND GREATEST(m.update_dt, COALESCE(m.accessed_at, m.update_dt))
        < now() - make_interval(days => c.memory_expiration_days)";

/// Archives expired memories, in batches, for at most `BUDGET`; returns how many. "Unused"
/// counts from the later of the last change and the last recall, so a memory that keeps being
/// recalled never expires. Agents without a config, or whose config has no
/// `memoryExpirationDays`, keep memories.
pub async fn archive_expired(db: &PgPool) -> sqlx::Result<u64> {
    archive_expired_in(db, BATCH, BUDGET).await
}

/// `archive_expired` with its batch size and time budget given.
pub async fn archive_expired_in(db: &PgPool, batch: i64, budget: Duration) -> sqlx::Result<u64> {
    // The condition again on the row updated: a memory recalled while its batch waits for the
    // row's lock is checked as it is then, not as the batch found it.
    let statement = format!(
        "UPDATE memories m SET status = 'ARCHIVED', update_dt = now()
         FROM agents a JOIN memory_configs c ON c.id = a.memory_config_id
         WHERE m.agent_id = a.id AND {EXPIRED} AND m.id IN (
           SELECT m.id FROM memories m
           JOIN agents a ON a.id = m.agent_id JOIN memory_configs c ON c.id = a.memory_config_id
           WHERE {EXPIRED} LIMIT $1)"
    );
    let started = Instant::now();
    let mut archived = 0;
    loop {
        let done = sqlx::query(&statement).bind(batch).execute(db).await?.rows_affected();
        archived += done;
        if done < batch as u64 || started.elapsed() >= budget {
            return Ok(archived);
        }
    }
}
