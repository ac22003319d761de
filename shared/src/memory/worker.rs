//! The consumer of the memory queue. The same handler runs as the memory Lambda worker (SQS,
//! partial batch failures) and inside the local server.

use aws_lambda_events::event::sqs::SqsMessage;

use super::extract;
use super::queue::ExtractMessage;
use crate::queue::{per_message, BatchHandler, StopAt};
use crate::AppState;

/// The memory worker: messages of a batch run concurrently, failures reported one by one
/// (redelivered, then dead-lettered after the queue's maxReceiveCount).
pub fn handler(state: AppState) -> BatchHandler {
    per_message(state, process)
}

/// An extraction is short and safe to run again: stopped at `StopAt` by the queue's worker, or
/// failed for a reason that may pass, it is retried.
async fn process(state: AppState, m: SqsMessage, _: StopAt) -> anyhow::Result<()> {
    let state = &state;
    let body = m.body.as_deref().unwrap_or_default();
    let msg: ExtractMessage =
        serde_json::from_str(body).map_err(|e| anyhow::anyhow!("not a memory extraction message ({e}): {body}"))?;
    let Some(conv) = extract::conversation(state.db(), msg.conversation_id).await? else {
        return Ok(()); // deleted meanwhile
    };
    let Some(config_id) = extract::current_config(state.db(), conv.agent_id).await? else {
        return Ok(()); // the agent's memory was turned off meanwhile
    };
    match extract::extract(state, &conv, config_id, None).await {
        Ok(written) => {
            tracing::info!(
                conversation_id = conv.id,
                memories = written.len(),
                "memories extracted"
            );
            Ok(())
        }
        // The error kept whole, its causes with it: shown as text, a database failure read
        // only "database".
        Err(u) if u.passing => {
            Err(anyhow::Error::new(u.error).context(format!("extracting conversation {} failed", conv.id)))
        }
        // Delivered again it fails again, paid each time. The messages stay unextracted: the
        // conversation's next extraction takes them up, once the config or quota allows.
        Err(u) => {
            tracing::warn!(conversation_id = conv.id, error = %u.error, "memory extraction refused; not retried");
            Ok(())
        }
    }
}
