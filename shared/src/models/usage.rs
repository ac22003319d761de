//! Per-call usage records and the statistics built from them.

use std::sync::{Arc, Mutex};
use tracing::Instrument;

use sqlx::{PgPool, Postgres, QueryBuilder};
use tokio::task::JoinHandle;

use super::client::Usage;
use super::repo::Visibility;
use super::{ModelConfigRow, UsageStat};

/// One upstream call, as recorded.
#[derive(Debug, Clone)]
pub struct UsageRecord {
    pub model_id: i64,
    pub model_name: String,
    pub model_type: String,
    pub provider_id: i64,
    pub provider_name: String,
    pub user_id: Option<i64>,
    pub call_kind: &'static str,
    pub usage: Usage,
    pub latency_ms: i64,
    /// Why the call failed, as stored; `None` for a call that answered.
    pub error: Option<String>,
    /// The failure's short, fixed name (see `ModelError::kind`).
    pub error_type: Option<&'static str>,
    pub cost: f64,
}

impl UsageRecord {
    pub fn new(model: &ModelConfigRow, user_id: Option<i64>, call_kind: &'static str) -> Self {
        Self {
            model_id: model.id,
            model_name: model.model_name.clone(),
            model_type: model.model_type.clone(),
            provider_id: model.provider_id,
            provider_name: model.provider_name.clone(),
            user_id,
            call_kind,
            usage: Usage::default(),
            latency_ms: 0,
            error: None,
            error_type: None,
            cost: 0.0,
        }
    }

    /// Marks the call failed.
    pub fn fail(&mut self, kind: &'static str, message: String) {
        self.error = Some(message);
        self.error_type = Some(kind);
    }

    pub fn fail_with(&mut self, e: &crate::models::client::ModelError) {
        self.fail(e.kind(), e.to_string());
    }
}

/// Price of the tokens from the config's optional `inputPricePer1k` / `outputPricePer1k`.
pub fn cost(model: &ModelConfigRow, usage: Usage) -> f64 {
    let price = |key: &str| {
        model
            .config_json
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0)
    };
    usage.prompt_tokens as f64 / 1000.0 * price("inputPricePer1k")
        + usage.completion_tokens as f64 / 1000.0 * price("outputPricePer1k")
}

/// Stores calls. A config (or user) deleted while a call ran is recorded as deleted (null, as
/// their earlier rows became), not lost to the foreign key; the model's name stays.
pub async fn record(db: &PgPool, records: &[UsageRecord]) -> sqlx::Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let mut qb = QueryBuilder::new("");
    push_insert(&mut qb, records);
    qb.build().execute(db).await?;
    Ok(())
}

/// Appends the statement that stores `records` (at least one; as `record` does) to `qb`: on its
/// own, or as the main statement after a `WITH` of the caller's, so a caller stores its own
/// result and the usage of the calls behind it in one statement. One row of values per record,
/// not arrays to unnest: the same text for the same number of records, whose generic plan
/// Postgres keeps (an `UNNEST` of arrays was planned again at every call).
pub fn push_insert(qb: &mut QueryBuilder<'_, Postgres>, records: &[UsageRecord]) {
    // Selected from the rows, so that a caller may add a WHERE that decides for all of them.
    qb.push(
        "INSERT INTO model_usage (model_id, model_name, model_type, provider_id, provider_name, user_id, call_kind,
         prompt_tokens, completion_tokens, latency_ms, success, error, cost) SELECT * FROM (",
    );
    qb.push_values(records, |mut row, r| {
        // The config's id even once it is deleted (ids are never reused): its statistics
        // outlive it, under the names copied here.
        row.push_bind(r.model_id)
            .push_bind(r.model_name.clone())
            .push_bind(r.model_type.clone())
            .push_bind(r.provider_id)
            .push_bind(r.provider_name.clone())
            .push("(SELECT id FROM users WHERE id = ")
            .push_bind_unseparated(r.user_id)
            .push_unseparated(")")
            .push_bind(r.call_kind)
            .push_bind(r.usage.prompt_tokens as i64)
            .push_bind(r.usage.completion_tokens as i64)
            .push_bind(r.latency_ms)
            .push_bind(r.error.is_none())
            .push_bind(r.error.clone())
            .push_bind(r.cost);
    });
    qb.push(") AS records");
}

/// Usage of calls whose caller stores it with its own result (a chat turn, with its answer),
/// one statement instead of one per call. Whatever was not taken when the last handle is
/// dropped (a turn that ended without storing) is stored on its own.
#[derive(Clone)]
pub struct PendingUsage {
    inner: Arc<Pending>,
}

struct Pending {
    db: PgPool,
    records: Mutex<Vec<UsageRecord>>,
    /// The quota settlements of dropped calls, running in tasks of their own.
    settling: Mutex<Vec<JoinHandle<()>>>,
}

impl PendingUsage {
    pub fn new(db: PgPool) -> Self {
        Self {
            inner: Arc::new(Pending {
                db,
                records: Mutex::default(),
                settling: Mutex::default(),
            }),
        }
    }

    /// A dropped call's settlement, which `store` waits for.
    pub fn settling(&self, task: JoinHandle<()>) {
        if let Ok(mut tasks) = self.inner.settling.lock() {
            tasks.push(task);
        }
    }

    pub fn push(&self, record: UsageRecord) {
        if let Ok(mut records) = self.inner.records.lock() {
            records.push(record);
        }
    }

    /// The records so far, for the caller's statement.
    pub fn take(&self) -> Vec<UsageRecord> {
        self.inner
            .records
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }

    /// Stores the records not taken, once the settlements of dropped calls have run: now
    /// rather than when the last handle is dropped (in a task of its own, which under Lambda
    /// may not run once the request has answered).
    pub async fn store(&self) {
        self.settled().await;
        record_logged(&self.inner.db, &self.take()).await;
    }

    /// Returns once the settlements of dropped calls (a stream cut by a stop or a client
    /// leaving) have run, so their tokens are back before the answer ends.
    pub async fn settled(&self) {
        let settling = self
            .inner
            .settling
            .lock()
            .map(|mut tasks| std::mem::take(&mut *tasks))
            .unwrap_or_default();
        for task in settling {
            let _ = task.await;
        }
    }

    /// Records taken for a statement that failed: stored on their own when the last handle
    /// is dropped.
    pub fn give_back(&self, records: Vec<UsageRecord>) {
        if let Ok(mut kept) = self.inner.records.lock() {
            kept.extend(records);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let records = self.records.get_mut().map(std::mem::take).unwrap_or_default();
        if records.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(records = records.len(), "model usage not recorded: no runtime");
            return;
        };
        let db = self.db.clone();
        runtime.spawn(async move { record_logged(&db, &records).await }.in_current_span());
    }
}

async fn record_logged(db: &PgPool, records: &[UsageRecord]) {
    if let Err(e) = record(db, records).await {
        // What was lost, to be reconciled by hand: the records are not kept anywhere else.
        for r in records {
            tracing::error!(
                error = %e,
                user_id = r.user_id,
                model_id = r.model_id,
                call_kind = r.call_kind,
                prompt_tokens = r.usage.prompt_tokens,
                completion_tokens = r.usage.completion_tokens,
                "recording model usage failed"
            );
        }
    }
}

/// Per-model sums of the usage records. The names are the config's and its provider's as they
/// are now (one config per group, so `max` reads its one value); once it is deleted, the copies
/// of its newest record, its last names. The copies are of whatever the config was called at
/// each call: their `max` mixed a renamed config's old name with a moved one's other provider.
/// `COALESCE` reads the newest record only for a deleted config.
const STAT_SELECT: &str = "SELECT u.model_id AS id, u.model_id,
    COALESCE(max(c.model_name), (SELECT l.model_name FROM model_usage l WHERE l.model_id = u.model_id
      ORDER BY l.id DESC LIMIT 1)) AS model_name,
    COALESCE(max(c.model_type), (SELECT l.model_type FROM model_usage l WHERE l.model_id = u.model_id
      ORDER BY l.id DESC LIMIT 1)) AS model_type,
    COALESCE(max(c.provider_id), (SELECT l.provider_id FROM model_usage l WHERE l.model_id = u.model_id
      ORDER BY l.id DESC LIMIT 1)) AS provider_id,
    COALESCE(max(p.provider_name), (SELECT l.provider_name FROM model_usage l WHERE l.model_id = u.model_id
      ORDER BY l.id DESC LIMIT 1)) AS provider_name,
    count(*) AS total_calls, count(*) FILTER (WHERE u.success) AS success_calls,
    count(*) FILTER (WHERE NOT u.success) AS failed_calls,
    COALESCE(count(*) FILTER (WHERE u.success)::float8 / NULLIF(count(*), 0), 0) AS success_rate,
    COALESCE(sum(u.prompt_tokens + u.completion_tokens), 0)::bigint AS total_tokens_used,
    COALESCE(sum(u.cost), 0)::float8 AS total_cost,
    COALESCE(avg(u.latency_ms) / 1000.0, 0)::float8 AS avg_response_time
    FROM model_usage u LEFT JOIN model_configs c ON c.id = u.model_id
    LEFT JOIN model_providers p ON p.id = c.provider_id
    WHERE u.model_id IS NOT NULL";

/// Stats of one model, of everyone's calls or of one user's (`caller`); zeros when it was
/// never called.
pub async fn for_model(db: &PgPool, model: &ModelConfigRow, caller: Option<i64>) -> sqlx::Result<UsageStat> {
    let row: Option<UsageStat> = sqlx::query_as(&format!(
        "{STAT_SELECT} AND u.model_id = $1 AND ($2::BIGINT IS NULL OR u.user_id = $2) GROUP BY u.model_id"
    ))
    .bind(model.id)
    .bind(caller)
    .fetch_optional(db)
    .await?;
    Ok(row.unwrap_or_else(|| UsageStat {
        id: model.id,
        model_id: model.id,
        model_name: model.model_name.clone(),
        model_type: model.model_type.clone(),
        provider_id: Some(model.provider_id),
        provider_name: Some(model.provider_name.clone()),
        total_calls: 0,
        success_calls: 0,
        failed_calls: 0,
        success_rate: 0.0,
        total_tokens_used: 0,
        total_cost: 0.0,
        avg_response_time: 0.0,
    }))
}

/// Per-model stats, paged: of everyone's calls (`None`), or of one user's calls on the models
/// that user can see. A user's calls may run on another user's PERSONAL model (chatting with
/// an agent its owner built on it); listing those would show the model's name and provider to
/// someone who cannot see the model.
pub async fn per_model(
    db: &PgPool,
    caller: Option<Visibility>,
    limit: i64,
    offset: i64,
) -> sqlx::Result<(Vec<UsageStat>, i64)> {
    let filter = |qb: &mut QueryBuilder<'_, Postgres>| {
        if let Some(v) = caller {
            qb.push(" AND u.user_id = ").push_bind(v.user_id);
            if !v.is_admin {
                qb.push(
                    " AND u.model_id IN (SELECT c.id FROM model_configs c WHERE c.scope = 'GLOBAL' OR c.creator_id = ",
                )
                .push_bind(v.user_id)
                .push(")");
            }
        }
    };
    let mut count =
        QueryBuilder::new("SELECT count(DISTINCT u.model_id) FROM model_usage u WHERE u.model_id IS NOT NULL");
    filter(&mut count);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    let mut rows = QueryBuilder::new(STAT_SELECT);
    filter(&mut rows);
    rows.push(" GROUP BY u.model_id ORDER BY u.model_id LIMIT ")
        .push_bind(limit)
        .push(" OFFSET ")
        .push_bind(offset);
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}
