//! Connectivity test of a model config: one minimal real call by model type.

use std::time::Instant;

use super::client::{ChatMessage, ChatRequest, InputKind};
use super::gateway::{self, Billing, CallError, ModelHandle};
use super::{ModelConfigRow, ModelType, TestResult};
use crate::domain::CurrentUser;
use crate::{validate, AppError, AppResult, AppState};

/// The endpoint's own words about a failure reach those who manage the config only.
pub async fn run(state: &AppState, row: ModelConfigRow, user: &CurrentUser) -> AppResult<TestResult> {
    let endpoint = gateway::endpoint_of(state, &row)?;
    let relay = row.managed_by(user);
    // A config's own timeout and retries are sized for chats (a minute, three tries); the
    // test answers within its limit, so an endpoint that drops packets or never answers is
    // told as such rather than as API Gateway's 504 after 29 s.
    let limit = state.config().model_test_timeout;
    let model = ModelHandle::new(row, endpoint).within(limit);
    let billing = Billing::of(user);
    let started = Instant::now();
    let outcome: Result<String, CallError> = match model.row.model_type() {
        ModelType::Chat => {
            let req = ChatRequest {
                messages: vec![ChatMessage::user("Hello")],
                max_tokens: Some(16),
                ..Default::default()
            };
            let reserve = state.config().quota_completion_reserve;
            // Regular users' calls ask for this many tokens when the config names no length
            // (`gateway::fit`); a model that takes fewer refuses all of them, which this call,
            // asking for 16, cannot show.
            let note = match model.endpoint.option_u64("maxTokens") {
                Some(_) => String::new(),
                None => format!(
                    "; regular users' calls will ask for up to {reserve} answer tokens: if the model takes fewer, \
                     set configJson.maxTokens"
                ),
            };
            gateway::chat(state, &model, billing, "test", &req).await.map(|r| {
                let said: String = r.content.chars().take(80).collect();
                format!("the chat model answered: {said}{note}")
            })
        }
        ModelType::Embedding => {
            let texts = ["connectivity test".to_owned()];
            gateway::embed(state, &model, billing, &texts, InputKind::Query, None)
                .await
                .map(|e| {
                    format!(
                        "the embedding model returned a {}-dimensional vector",
                        e.dimension().unwrap_or(0)
                    )
                })
        }
        ModelType::Reranker => {
            let docs = ["Paris is the capital of France.".to_owned()];
            gateway::rerank(state, &model, billing, "What is the capital of France?", &docs, 1)
                .await
                .map(|hits| {
                    format!(
                        "the rerank model scored the test document {:.3}",
                        hits.first().map(|h| h.score).unwrap_or(0.0)
                    )
                })
        }
    };
    let response_time_ms = started.elapsed().as_millis() as i64;
    match outcome {
        Ok(message) => Ok(TestResult {
            success: true,
            message,
            response_time_ms,
        }),
        Err(CallError::Model(e)) => Ok(TestResult {
            success: false,
            message: if relay { e.to_string() } else { e.brief() },
            response_time_ms,
        }),
        Err(CallError::Refused(e)) => Err(e),
    }
}

/// Asks the embedding model `model_id` (sent as `embeddingModelId`) for one vector to learn its
/// dimension, refused when `what` (a knowledge base, memories) could not index vectors that long.
pub async fn vector_dimension(state: &AppState, billing: Billing, model_id: i64, what: &str) -> AppResult<i32> {
    let probed = embedding_length(state, billing, model_id).await?;
    validate::vector_dimension(i64::try_from(probed).unwrap_or(i64::MAX)).map_err(|_| {
        // The service never asks a model for shorter vectors, so only another model helps.
        AppError::validation(format!(
            "embeddingModelId: the model's vectors have {probed} dimensions, more than the {} {what} can index; \
             choose a model with shorter vectors",
            validate::MAX_VECTOR_DIMENSION
        ))
    })
}

/// Refuses `told` as `dimensionOfVectorModel` when the embedding model `model_id` answers with
/// vectors of another length. A length given is taken at its word while the model cannot
/// answer (down, or the caller's quota spent), and must be the model's when it can: every
/// later embedding would otherwise be paid for, then refused for its length.
pub async fn check_dimension(state: &AppState, billing: Billing, model_id: i64, told: i64) -> AppResult<()> {
    match embedding_length(state, billing, model_id).await {
        Ok(length) if i64::try_from(length).ok() != Some(told) => Err(AppError::validation(format!(
            "dimensionOfVectorModel: the model's vectors have {length} dimensions, not {told}"
        ))),
        Err(e) if e.is_server_side() => Err(e),
        _ => Ok(()),
    }
}

/// The length of one vector of the embedding model `model_id`, as it answers now: within
/// `model_test_timeout`, as a connectivity test, since the request that asks (a base or memory
/// config saved) waits for it under API Gateway's 29 s, where the config's own timeout and
/// retries could take minutes.
pub async fn embedding_length(state: &AppState, billing: Billing, model_id: i64) -> AppResult<usize> {
    let model = gateway::load(state, model_id, ModelType::Embedding)
        .await?
        .within(state.config().model_test_timeout);
    let probe = ["dimension probe".to_owned()];
    let out = gateway::embed(state, &model, billing, &probe, InputKind::Query, None)
        .await
        .map_err(|e| match AppError::from(e) {
            // The service's own failure (its database during the quota hold) is not the
            // caller's to fix with a dimension: answered and logged as what it is.
            e if e.is_server_side() => e,
            e => AppError::validation(format!(
                "embeddingModelId: the dimension could not be probed ({e}); send dimensionOfVectorModel"
            )),
        })?;
    out.dimension()
        .ok_or_else(|| AppError::validation("embeddingModelId: the model returned no vector"))
}
