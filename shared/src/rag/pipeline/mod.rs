//! The ingestion pipeline: parse -> chunk -> embed -> index, one document per queue message.
//! The same handler runs as the ingest Lambda worker and inside the local server.

mod index;
mod run;

use aws_lambda_events::event::sqs::SqsMessage;
use serde::{Deserialize, Serialize};

use crate::queue::{per_message, BatchHandler, QueueName, StopAt, MAX_RECEIVES};
use crate::AppState;

pub use index::write_chunks;

/// One document run to process. The run id makes redelivery and reprocessing safe: only
/// the newest run may write its results.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestMessage {
    pub document_id: i64,
    pub run_id: uuid::Uuid,
}

/// Queues a document as work of its uploader, who pays for its model calls; if the queue is
/// unreachable the document is marked failed with a message that says to reprocess it, instead
/// of staying pending forever.
pub async fn enqueue(state: &AppState, document_id: i64, run_id: uuid::Uuid, uploader_id: i64) {
    let body = serde_json::json!(IngestMessage { document_id, run_id }).to_string();
    let tenant = format!("user:{uploader_id}");
    if let Err(e) = state.queue().send(QueueName::Ingest, &tenant, body).await {
        tracing::error!(document_id, error = ?e, "queueing a document failed");
        let message = format!("the document could not be queued ({e}); reprocess it");
        if let Err(e) =
            crate::rag::documents::repo::mark_failed(state.db(), document_id, run_id, "queue", &message).await
        {
            // Left pending: reprocessing it, or the daily housekeeping's stalled-document job, ends that.
            tracing::error!(document_id, error = %e, "marking an unqueued document failed did not work either");
        }
    }
}

/// The ingest worker: every message of a batch is processed concurrently, failures reported
/// one by one.
pub fn handler(state: AppState) -> BatchHandler {
    per_message(state, process)
}

async fn process(state: AppState, m: SqsMessage, stop_at: StopAt) -> anyhow::Result<()> {
    let state = &state;
    let body = m.body.as_deref().unwrap_or_default();
    let msg: IngestMessage =
        serde_json::from_str(body).map_err(|e| anyhow::anyhow!("not an ingest message ({e}): {body}"))?;
    let receives: u32 = m
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    run::run(state, &msg, receives >= MAX_RECEIVES, stop_at).await
}
