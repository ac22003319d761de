//! The memory queue: one message per conversation extraction. The same handler runs as the
//! memory Lambda worker (SQS, partial batch failures) and inside the local server.

use aws_lambda_events::event::sqs::SqsMessage;
use serde::{Deserialize, Serialize};

use super::extract;
use crate::queue::{per_message, BatchHandler, QueueName};
use crate::{AppError, AppResult, AppState};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractMessage {
    /// conversations.id
    pub conversation_id: i64,
    pub memory_config_id: Option<i64>,
}

pub async fn enqueue(state: &AppState, conversation_id: i64, memory_config_id: Option<i64>) -> AppResult<()> {
    let body = serde_json::json!(ExtractMessage {
        conversation_id,
        memory_config_id
    })
    .to_string();
    state
        .queue()
        .send(QueueName::Memory, body)
        .await
        .map_err(|e| AppError::Internal(e.context("queueing a memory extraction failed")))
}

/// The memory worker: messages of a batch run concurrently, failures reported one by one
/// (redelivered, then dead-lettered after the queue's maxReceiveCount).
pub fn handler(state: AppState) -> BatchHandler {
    per_message(state, process)
}

async fn process(state: AppState, m: SqsMessage) -> anyhow::Result<()> {
    let state = &state;
    let body = m.body.as_deref().unwrap_or_default();
    let msg: ExtractMessage =
        serde_json::from_str(body).map_err(|e| anyhow::anyhow!("not a memory extraction message ({e}): {body}"))?;
    let Some(conv) = extract::conversation(state.db(), msg.conversation_id).await? else {
        return Ok(()); // deleted meanwhile
    };
    let written = extract::extract(state, &conv, msg.memory_config_id)
        .await
        .map_err(|e| anyhow::anyhow!("extracting conversation {} failed: {e}", conv.id))?;
    tracing::info!(
        conversation_id = conv.id,
        memories = written.len(),
        "memories extracted"
    );
    Ok(())
}
