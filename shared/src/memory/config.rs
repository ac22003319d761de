//! Memory configs: the recall strategy and extraction settings an agent is bound to, their
//! validation, and the built-in defaults used when an agent has none.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgPool};
use utoipa::ToSchema;

use crate::domain::CurrentUser;
use crate::models::service::ModelRef;
use crate::models::{self, ModelType};
use crate::rag::search::fusion;
use crate::stores;
use crate::validate;
use crate::{time, AppError, AppResult, AppState};

pub const FUSION_STRATEGIES: [&str; 2] = ["RRF", "WEIGHTED_SUM"];

/// The stored settings; also the shape of the built-in defaults (`id` None).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConfigRow {
    pub id: Option<i64>,
    pub name: String,
    pub status: i16,
    pub vector_store_instance_id: Option<i64>,
    pub embedding_model_id: Option<i64>,
    pub dimension: Option<i32>,
    pub max_recall: i32,
    pub rerank_model_id: Option<i64>,
    pub enter_rerank_count: i32,
    pub extraction_interval: i32,
    pub max_memories_per_extraction: i32,
    pub extraction_model_id: Option<i64>,
    pub memory_expiration_days: Option<i32>,
    pub rrf_k: i32,
    pub search_engine_enable: bool,
    pub search_engine_instance_id: Option<i64>,
    pub rewrite_enabled: bool,
    pub rerank_enabled: bool,
    pub threshold_enabled: bool,
    pub similarity_threshold: f64,
    pub dense_weight: f64,
    pub fusion_strategy: String,
    pub custom_extraction_prompt: Option<String>,
    pub creator_id: i64,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
}

impl ConfigRow {
    /// What an agent with `memoryEnabled` but no `memoryConfigId` gets: the default EMBEDDING
    /// model, the default CHAT model for extraction, vector-only recall of 5, an extraction
    /// every 5 rounds of at most 5 memories, no expiry. The same values are the column
    /// defaults of a new config.
    pub fn builtin() -> Self {
        let now = Utc::now();
        Self {
            id: None,
            name: "built-in defaults".to_owned(),
            status: 1,
            vector_store_instance_id: None,
            embedding_model_id: None,
            dimension: None,
            max_recall: 5,
            rerank_model_id: None,
            enter_rerank_count: 20,
            extraction_interval: 5,
            max_memories_per_extraction: 5,
            extraction_model_id: None,
            memory_expiration_days: None,
            rrf_k: 60,
            search_engine_enable: false,
            search_engine_instance_id: None,
            rewrite_enabled: false,
            rerank_enabled: false,
            threshold_enabled: false,
            similarity_threshold: 0.5,
            dense_weight: fusion::DEFAULT_DENSE_WEIGHT,
            fusion_strategy: fusion::DEFAULT_STRATEGY.to_owned(),
            custom_extraction_prompt: None,
            creator_id: 0,
            create_dt: now,
            update_dt: now,
        }
    }

    /// Applies the fields a request carries (absent = unchanged).
    pub fn apply(&mut self, r: ConfigRequest) {
        macro_rules! set {
            ($($field:ident <- $src:expr),* $(,)?) => { $( if let Some(v) = $src { self.$field = v; } )* };
        }
        set!(
            name <- r.name.map(|n| n.trim().to_owned()),
            status <- r.status,
            max_recall <- r.max_recall,
            enter_rerank_count <- r.enter_rerank_count,
            extraction_interval <- r.extraction_interval,
            max_memories_per_extraction <- r.max_memories_per_extraction,
            rrf_k <- r.rrf_k,
            search_engine_enable <- r.search_engine_enable,
            rewrite_enabled <- r.rewrite_enabled,
            rerank_enabled <- r.rerank_enabled,
            threshold_enabled <- r.threshold_enabled,
            similarity_threshold <- r.similarity_threshold,
            dense_weight <- r.dense_weight,
            fusion_strategy <- r.fusion_strategy.map(|f| f.trim().to_uppercase()),
        );
        set!(
            vector_store_instance_id <- r.vector_store_instance_id.map(Some),
            embedding_model_id <- r.embedding_model_id.map(Some),
            dimension <- r.dimension_of_vector_model.map(Some),
            rerank_model_id <- r.rerank_model_id.map(Some),
            extraction_model_id <- r.extraction_model_id.map(Some),
            memory_expiration_days <- r.memory_expiration_days.map(Some),
            search_engine_instance_id <- r.search_engine_instance_id.map(Some),
            custom_extraction_prompt <- r.custom_extraction_prompt.map(|p| validate::optional(Some(p))),
        );
    }

    /// Every rule of a config, checked on the merged result of a create or an update
    /// (`before`: the stored config an update starts from).
    pub async fn validate(&self, state: &AppState, user: &CurrentUser, before: Option<&ConfigRow>) -> AppResult<()> {
        validate::length("name", &self.name, 1, 100)?;
        validate::range("status", self.status.into(), 0, 1)?;
        if let Some(d) = self.dimension {
            validate::vector_dimension(d.into())?;
        }
        validate::range("maxRecall", self.max_recall.into(), 1, 100)?;
        validate::range("enterRerankCount", self.enter_rerank_count.into(), 1, 200)?;
        validate::range("extractionInterval", self.extraction_interval.into(), 1, 1000)?;
        validate::range(
            "maxMemoriesPerExtraction",
            self.max_memories_per_extraction.into(),
            1,
            50,
        )?;
        if let Some(d) = self.memory_expiration_days {
            validate::range("memoryExpirationDays", d.into(), 1, 36500)?;
        }
        validate::range("rrfK", self.rrf_k.into(), 1, 1000)?;
        unit("similarityThreshold", self.similarity_threshold)?;
        unit("denseWeight", self.dense_weight)?;
        if !FUSION_STRATEGIES.contains(&self.fusion_strategy.as_str()) {
            return Err(AppError::validation("fusionStrategy must be RRF or WEIGHTED_SUM"));
        }
        if let Some(p) = &self.custom_extraction_prompt {
            validate::length("customExtractionPrompt", p, 1, 8000)?;
        }
        let embedding = validate::present("embeddingModelId", self.embedding_model_id)?;
        let new_embedding = Some(embedding) != before.and_then(|b| b.embedding_model_id);
        if self.rerank_enabled && self.rerank_model_id.is_none() {
            return Err(AppError::validation(
                "rerankModelId is required when rerankEnabled is true",
            ));
        }
        let added = self.new_models(before);
        for r in &added {
            models::service::usable_config(state, user, r.field, r.id, r.t).await?;
        }
        // Before the dimension is asked, so that a refused edit calls no endpoint; checked
        // again under the config's lock (`hold_new_models`).
        check_binders_may_use(&mut *state.db().acquire().await?, before, &added).await?;
        // Asked now, as a knowledge base asks on creation (recorded, not charged, as memory
        // upkeep is): vectors longer than an index holds would fail the first memory written.
        if new_embedding && self.dimension.is_none() {
            let billing = models::gateway::Billing::RecordOnly(Some(user.id));
            models::probe::vector_dimension(state, billing, embedding, "memories").await?;
        }
        for (field, id, category) in [
            (
                "vectorStoreInstanceId",
                self.vector_store_instance_id,
                stores::VECTOR_STORE,
            ),
            (
                "searchEngineInstanceId",
                self.search_engine_instance_id,
                stores::SEARCH_ENGINE,
            ),
        ] {
            if let Some(id) = id {
                stores::service::usable(state, field, Some(id), category).await?;
            }
        }
        Ok(())
    }

    /// The models this config names that `before` (the stored config of an update) did not.
    /// Only those are checked: one already stored was checked when it was set, and checking it
    /// again would lock a config whose model was disabled since.
    fn new_models(&self, before: Option<&ConfigRow>) -> Vec<ModelRef<'static>> {
        [
            (
                "embeddingModelId",
                self.embedding_model_id,
                ModelType::Embedding,
                before.and_then(|b| b.embedding_model_id),
            ),
            (
                "rerankModelId",
                self.rerank_model_id,
                ModelType::Reranker,
                before.and_then(|b| b.rerank_model_id),
            ),
            (
                "extractionModelId",
                self.extraction_model_id,
                ModelType::Chat,
                before.and_then(|b| b.extraction_model_id),
            ),
        ]
        .into_iter()
        .filter_map(|(field, id, t, stored)| id.filter(|id| Some(*id) != stored).map(|id| ModelRef { field, id, t }))
        .collect()
    }

    /// Under the config's lock, in the transaction that saves it: the models it newly names,
    /// held against a retype (and checked again), and each one usable by the creators of the
    /// agents bound to the config.
    pub async fn hold_new_models(
        &self,
        conn: &mut PgConnection,
        user: &CurrentUser,
        before: Option<&ConfigRow>,
    ) -> AppResult<()> {
        let added = self.new_models(before);
        models::service::hold_usable(conn, user, &added).await?;
        check_binders_may_use(conn, before, &added).await
    }

    /// Recall and extraction with this config run its models. Configs are shared, the models
    /// behind them may be someone's PERSONAL ones (with their key): whoever makes the config
    /// run, by binding it to an agent or by debugging recall, must be able to pick each model
    /// directly; in a transaction, the models stay held until it ends. The error names `field`.
    pub async fn check_models_usable(&self, conn: &mut PgConnection, user: &CurrentUser, field: &str) -> AppResult<()> {
        let refs: Vec<ModelRef<'_>> = [
            (self.embedding_model_id, ModelType::Embedding),
            (self.extraction_model_id, ModelType::Chat),
            (self.rerank_model_id, ModelType::Reranker),
        ]
        .into_iter()
        .filter_map(|(id, t)| id.map(|id| ModelRef { field, id, t }))
        .collect();
        models::service::hold_usable(conn, user, &refs).await
    }
}

/// The agents bound to a config run its models for their creators' chats, so a model put into
/// a bound config must be one each of those creators could pick: otherwise the config's editor
/// could send other people's conversations to an endpoint of their own PERSONAL model. The
/// rule is `can_see` of the model service, for the binders: an administrator sees every
/// model, anyone else GLOBAL ones and their own.
async fn check_binders_may_use(
    conn: &mut PgConnection,
    before: Option<&ConfigRow>,
    added: &[ModelRef<'_>],
) -> AppResult<()> {
    let Some(config_id) = before.and_then(|b| b.id) else {
        return Ok(());
    };
    for r in added {
        check_binder_may_use(&mut *conn, config_id, r.field, r.id).await?;
    }
    Ok(())
}

async fn check_binder_may_use(conn: &mut PgConnection, config_id: i64, field: &str, model_id: i64) -> AppResult<()> {
    let refused: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agents a JOIN users u ON u.id = a.creator_id
         JOIN model_configs m ON m.id = $2
         WHERE a.memory_config_id = $1 AND m.scope = 'PERSONAL' AND m.creator_id <> a.creator_id
           AND u.role <> $3",
    )
    .bind(config_id)
    .bind(model_id)
    .bind(crate::domain::Role::Admin.code())
    .fetch_one(conn)
    .await?;
    if refused > 0 {
        return Err(AppError::validation(format!(
            "{field}: model {model_id} is not available to the creators of {refused} agent(s) using this memory config"
        )));
    }
    Ok(())
}

fn unit(field: &str, v: f64) -> AppResult<()> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(AppError::validation(format!("{field} must be between 0 and 1")))
    }
}

/// Body of POST and PUT /memory/config: every field optional on update; `name` and
/// `embeddingModelId` required on create.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigRequest {
    pub name: Option<String>,
    /// 1 enabled (default), 0 disabled.
    pub status: Option<i16>,
    pub vector_store_instance_id: Option<i64>,
    pub embedding_model_id: Option<i64>,
    pub dimension_of_vector_model: Option<i32>,
    pub max_recall: Option<i32>,
    pub rerank_model_id: Option<i64>,
    pub enter_rerank_count: Option<i32>,
    /// Rounds (user messages) between two extractions.
    pub extraction_interval: Option<i32>,
    pub max_memories_per_extraction: Option<i32>,
    pub extraction_model_id: Option<i64>,
    pub memory_expiration_days: Option<i32>,
    pub rrf_k: Option<i32>,
    pub search_engine_enable: Option<bool>,
    pub rewrite_enabled: Option<bool>,
    pub rerank_enabled: Option<bool>,
    pub threshold_enabled: Option<bool>,
    pub similarity_threshold: Option<f64>,
    pub dense_weight: Option<f64>,
    /// RRF or WEIGHTED_SUM.
    pub fusion_strategy: Option<String>,
    pub search_engine_instance_id: Option<i64>,
    pub custom_extraction_prompt: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigView {
    pub id: i64,
    pub name: String,
    pub status: i16,
    pub vector_store_instance_id: Option<i64>,
    pub embedding_model_id: Option<i64>,
    pub dimension_of_vector_model: Option<i32>,
    pub max_recall: i32,
    pub rerank_model_id: Option<i64>,
    pub enter_rerank_count: i32,
    pub extraction_interval: i32,
    pub max_memories_per_extraction: i32,
    pub extraction_model_id: Option<i64>,
    pub memory_expiration_days: Option<i32>,
    pub rrf_k: i32,
    pub search_engine_enable: bool,
    pub rewrite_enabled: bool,
    pub rerank_enabled: bool,
    pub threshold_enabled: bool,
    pub similarity_threshold: f64,
    pub dense_weight: f64,
    pub fusion_strategy: String,
    pub search_engine_instance_id: Option<i64>,
    pub custom_extraction_prompt: Option<String>,
    pub creator_id: i64,
    pub create_dt: String,
    pub update_dt: String,
}

impl From<ConfigRow> for ConfigView {
    fn from(r: ConfigRow) -> Self {
        Self {
            id: r.id.unwrap_or_default(),
            name: r.name,
            status: r.status,
            vector_store_instance_id: r.vector_store_instance_id,
            embedding_model_id: r.embedding_model_id,
            dimension_of_vector_model: r.dimension,
            max_recall: r.max_recall,
            rerank_model_id: r.rerank_model_id,
            enter_rerank_count: r.enter_rerank_count,
            extraction_interval: r.extraction_interval,
            max_memories_per_extraction: r.max_memories_per_extraction,
            extraction_model_id: r.extraction_model_id,
            memory_expiration_days: r.memory_expiration_days,
            rrf_k: r.rrf_k,
            search_engine_enable: r.search_engine_enable,
            rewrite_enabled: r.rewrite_enabled,
            rerank_enabled: r.rerank_enabled,
            threshold_enabled: r.threshold_enabled,
            similarity_threshold: r.similarity_threshold,
            dense_weight: r.dense_weight,
            fusion_strategy: r.fusion_strategy,
            search_engine_instance_id: r.search_engine_instance_id,
            custom_extraction_prompt: r.custom_extraction_prompt,
            creator_id: r.creator_id,
            create_dt: time::datetime(r.create_dt),
            update_dt: time::datetime(r.update_dt),
        }
    }
}

const COLUMNS: &str = "id, name, status, vector_store_instance_id, embedding_model_id, dimension, max_recall,
    rerank_model_id, enter_rerank_count, extraction_interval, max_memories_per_extraction, extraction_model_id,
    memory_expiration_days, rrf_k, search_engine_enable, search_engine_instance_id, rewrite_enabled, rerank_enabled,
    threshold_enabled, similarity_threshold, dense_weight, fusion_strategy, custom_extraction_prompt, creator_id,
    create_dt, update_dt";

pub async fn find(db: &PgPool, id: i64) -> sqlx::Result<Option<ConfigRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM memory_configs WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// The config, held until the transaction ends: an agent bound to it is written under this
/// hold, and an edit of the config takes the row for update before it checks the agents bound
/// to it. Either the edit's check sees the new binding or the binding's check sees the edit.
pub async fn find_held(conn: &mut PgConnection, id: i64) -> sqlx::Result<Option<ConfigRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM memory_configs WHERE id = $1 FOR SHARE"))
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Takes the config for update (see `find_held`).
pub async fn lock_for_edit(conn: &mut PgConnection, id: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT 1 FROM memory_configs WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(conn)
        .await
        .map(|_| ())
}

pub async fn list(db: &PgPool) -> sqlx::Result<Vec<ConfigRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM memory_configs ORDER BY id"))
        .fetch_all(db)
        .await
}

/// The settings an agent's memory runs with: its config, or the built-in defaults when it
/// has none. A config id that no longer exists is an error, not a silent fallback.
pub async fn effective(db: &PgPool, id: Option<i64>) -> AppResult<ConfigRow> {
    match id {
        None => Ok(ConfigRow::builtin()),
        Some(id) => find(db, id)
            .await?
            .ok_or_else(|| AppError::business(format!("memory config {id} does not exist"))),
    }
}

/// Writes a new config or every field of an existing one; returns the id. An existing one is
/// written only as it was read (`c.update_dt`): None when it changed since, and nothing was
/// written, since `c` would undo that change.
pub async fn save(db: impl sqlx::PgExecutor<'_>, c: &ConfigRow) -> sqlx::Result<Option<i64>> {
    let mut q = match c.id {
        None => sqlx::QueryBuilder::new(
            "INSERT INTO memory_configs (name, status, vector_store_instance_id, embedding_model_id, dimension, max_recall,
             rerank_model_id, enter_rerank_count, extraction_interval, max_memories_per_extraction, extraction_model_id,
             memory_expiration_days, rrf_k, search_engine_enable, search_engine_instance_id, rewrite_enabled,
             rerank_enabled, threshold_enabled, similarity_threshold, dense_weight, fusion_strategy,
             custom_extraction_prompt, creator_id) VALUES (",
        ),
        Some(_) => sqlx::QueryBuilder::new(
            "UPDATE memory_configs SET update_dt = now(), (name, status, vector_store_instance_id, embedding_model_id,
             dimension, max_recall, rerank_model_id, enter_rerank_count, extraction_interval, max_memories_per_extraction,
             extraction_model_id, memory_expiration_days, rrf_k, search_engine_enable, search_engine_instance_id,
             rewrite_enabled, rerank_enabled, threshold_enabled, similarity_threshold, dense_weight, fusion_strategy,
             custom_extraction_prompt, creator_id) = (",
        ),
    };
    let mut s = q.separated(", ");
    s.push_bind(&c.name)
        .push_bind(c.status)
        .push_bind(c.vector_store_instance_id)
        .push_bind(c.embedding_model_id)
        .push_bind(c.dimension)
        .push_bind(c.max_recall)
        .push_bind(c.rerank_model_id)
        .push_bind(c.enter_rerank_count)
        .push_bind(c.extraction_interval)
        .push_bind(c.max_memories_per_extraction)
        .push_bind(c.extraction_model_id)
        .push_bind(c.memory_expiration_days)
        .push_bind(c.rrf_k)
        .push_bind(c.search_engine_enable)
        .push_bind(c.search_engine_instance_id)
        .push_bind(c.rewrite_enabled)
        .push_bind(c.rerank_enabled)
        .push_bind(c.threshold_enabled)
        .push_bind(c.similarity_threshold)
        .push_bind(c.dense_weight)
        .push_bind(&c.fusion_strategy)
        .push_bind(&c.custom_extraction_prompt)
        .push_bind(c.creator_id);
    match c.id {
        None => q.push(") RETURNING id"),
        Some(id) => q
            .push(") WHERE id = ")
            .push_bind(id)
            .push(" AND update_dt = ")
            .push_bind(c.update_dt)
            .push(" RETURNING id"),
    };
    q.build_query_scalar().fetch_optional(db).await
}

pub async fn delete(db: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM memory_configs WHERE id = $1")
        .bind(id)
        .execute(db)
        .await
        .map(|_| ())
}

/// Agents bound to the config.
pub async fn agents_using(db: &PgPool, id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM agents WHERE memory_config_id = $1")
        .bind(id)
        .fetch_one(db)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_changes_only_the_given_fields() {
        let mut c = ConfigRow::builtin();
        c.custom_extraction_prompt = Some("old".into());
        c.apply(ConfigRequest {
            name: Some("  tuned ".into()),
            max_recall: Some(8),
            fusion_strategy: Some("rrf".into()),
            memory_expiration_days: Some(30),
            custom_extraction_prompt: Some("  ".into()),
            ..ConfigRequest::default()
        });
        assert_eq!(c.name, "tuned");
        assert_eq!(c.max_recall, 8);
        assert_eq!(c.fusion_strategy, "RRF");
        assert_eq!(c.memory_expiration_days, Some(30));
        // A blank prompt clears the custom one: the built-in prompt applies again.
        assert_eq!(c.custom_extraction_prompt, None);
        assert_eq!(c.extraction_interval, 5);
        assert_eq!(c.dense_weight, fusion::DEFAULT_DENSE_WEIGHT);
    }
}
