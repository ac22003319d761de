//! Memory configs' rules: what a request may change, and the checks a config must pass,
//! against the models it names and the agents bound to it.

use sqlx::{PgConnection, PgExecutor};

use super::config_model::{ConfigRequest, ConfigRow, FUSION_STRATEGIES};
use crate::domain::CurrentUser;
use crate::models::service::ModelRef;
use crate::models::{self, ModelType};
use crate::stores;
use crate::validate;
use crate::{AppError, AppResult, AppState};

impl ConfigRow {
    /// Applies the fields a request carries (absent = unchanged, `null` clears). A new
    /// embedding model without a dimension drops the old model's: kept, every vector of the
    /// new one would be refused as the wrong length (validation asks the new model instead).
    pub fn apply(&mut self, r: ConfigRequest) {
        if r.embedding_model_id
            .is_some_and(|id| Some(id) != self.embedding_model_id)
            && r.dimension_of_vector_model.flatten().is_none()
        {
            self.dimension = None;
        }
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
            vector_store_instance_id <- r.vector_store_instance_id,
            embedding_model_id <- r.embedding_model_id.map(Some),
            dimension <- r.dimension_of_vector_model,
            rerank_model_id <- r.rerank_model_id,
            extraction_model_id <- r.extraction_model_id,
            memory_expiration_days <- r.memory_expiration_days,
            search_engine_instance_id <- r.search_engine_instance_id,
            custom_extraction_prompt <- r.custom_extraction_prompt.map(validate::optional),
        );
    }

    /// Every rule of a config, checked on the merged result of a create or an update
    /// (`before`: the stored config an update starts from).
    ///
    /// A new embedding model given without a dimension is asked for it, and the answer is kept
    /// (`dimension`): every vector of the config is then held to that length, as a knowledge
    /// base's are. Left unset, the model's endpoint decided each vector's length, and recall,
    /// which compares a query only with memories of its own length, lost the others.
    pub async fn validate(
        &mut self,
        state: &AppState,
        user: &CurrentUser,
        before: Option<&ConfigRow>,
    ) -> AppResult<()> {
        validate::length("name", &self.name, 1, 100)?;
        // Listed to every signed-in user; a name kept from before is not judged again.
        if before.is_none_or(|b| b.name != self.name) {
            validate::printable("name", &self.name, false)?;
        }
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
        // Recall reranks its first enterRerankCount candidates and keeps maxRecall of them:
        // fewer candidates returned fewer memories than asked, without a word.
        if self.rerank_enabled && self.enter_rerank_count < self.max_recall {
            return Err(AppError::validation(
                "enterRerankCount must be at least maxRecall when reranking",
            ));
        }
        let added = self.new_models(before);
        for r in &added {
            models::service::usable_config(state, user, r.field, r.id, r.t).await?;
        }
        // Before the dimension is asked, so that a refused edit calls no endpoint; checked
        // again under the config's lock (`hold_new_models`).
        check_binders_may_use(state.db(), user, before, &added).await?;
        // Only a store the edit names anew, as for the models: one stored was checked when it
        // was set.
        for (field, id, stored, category) in [
            (
                "vectorStoreInstanceId",
                self.vector_store_instance_id,
                before.and_then(|b| b.vector_store_instance_id),
                stores::VECTOR_STORE,
            ),
            (
                "searchEngineInstanceId",
                self.search_engine_instance_id,
                before.and_then(|b| b.search_engine_instance_id),
                stores::SEARCH_ENGINE,
            ),
        ] {
            if let Some(id) = id.filter(|id| Some(*id) != stored) {
                stores::service::usable_for_memories(state, field, id, category).await?;
            }
        }
        // Asked now, as a knowledge base asks on creation (recorded, not charged, as memory
        // upkeep is; a knowledge base charges its creator): vectors longer than an index holds
        // would fail the first memory written.
        let billing = models::gateway::Billing::RecordOnly(Some(user.id));
        let new_dimension = self.dimension != before.and_then(|b| b.dimension);
        match self.dimension {
            None if new_embedding => {
                self.dimension = Some(models::probe::vector_dimension(state, billing, embedding, "memories").await?);
            }
            // Every extraction would otherwise pay for its model call, then fail at storing the
            // memories, on every retry.
            Some(told) if new_embedding || new_dimension => {
                models::probe::check_dimension(state, billing, embedding, told.into()).await?;
            }
            _ => {}
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
        check_binders_may_use(&mut *conn, user, before, &added).await
    }

    /// Recall and extraction with this config run its models. Configs are shared, the models
    /// behind them may be someone's PERSONAL ones (with their key): whoever makes the config
    /// run, by binding it to an agent or by debugging recall, must be able to pick each model
    /// directly (`models::service::hold_usable` on these). The refusal names `field`.
    pub fn model_refs<'f>(&self, field: &'f str) -> Vec<ModelRef<'f>> {
        [
            (self.embedding_model_id, ModelType::Embedding),
            (self.extraction_model_id, ModelType::Chat),
            (self.rerank_model_id, ModelType::Reranker),
        ]
        .into_iter()
        .filter_map(|(id, t)| id.map(|id| ModelRef { field, id, t }))
        .collect()
    }
}

/// The agents bound to a config run its models in their chats, so a PERSONAL model put into a
/// bound config must be the agents' creator's: otherwise the config's editor could send other
/// people's conversations to an endpoint of their own (`agents::repo::bound_agents_barred`).
async fn check_binders_may_use(
    db: impl PgExecutor<'_>,
    editor: &CurrentUser,
    before: Option<&ConfigRow>,
    added: &[ModelRef<'_>],
) -> AppResult<()> {
    // A new config has no binders yet.
    let Some(config_id) = before.and_then(|b| b.id) else {
        return Ok(());
    };
    let binding = crate::agents::repo::Binding::MemoryConfig(config_id);
    crate::agents::references::check_bound_agents_may_run(db, binding, added, editor).await
}

fn unit(field: &str, v: f64) -> AppResult<()> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(AppError::validation(format!("{field} must be between 0 and 1")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::search::fusion;

    #[test]
    fn apply_changes_only_the_given_fields() {
        let mut c = ConfigRow::builtin();
        c.custom_extraction_prompt = Some("old".into());
        c.apply(ConfigRequest {
            name: Some("  tuned ".into()),
            max_recall: Some(8),
            fusion_strategy: Some("rrf".into()),
            memory_expiration_days: Some(Some(30)),
            custom_extraction_prompt: Some(Some("  ".into())),
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
        // Absent keeps, null clears.
        c.apply(ConfigRequest::default());
        assert_eq!(c.memory_expiration_days, Some(30));
        c.apply(ConfigRequest {
            memory_expiration_days: Some(None),
            ..ConfigRequest::default()
        });
        assert_eq!(c.memory_expiration_days, None);
        // The prompt too: a null clears it (it was ignored, the old prompt kept).
        c.custom_extraction_prompt = Some("old".into());
        let cleared: ConfigRequest = serde_json::from_str(r#"{"customExtractionPrompt": null}"#).unwrap();
        c.apply(cleared);
        assert_eq!(c.custom_extraction_prompt, None);
    }
}
