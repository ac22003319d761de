//! Background work queues. SQS in production; the same worker handlers also run in-process
//! (local server, tests), fed either by an SQS poller or by Tokio channels, and both honour
//! the Lambda partial-batch-failure answer.

mod memory;
mod sqs;

use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage, SqsMessageAttribute};
use futures::future::BoxFuture;
use futures::FutureExt;
use tracing::Instrument;

pub use memory::InProcessQueue;
pub use sqs::SqsQueue;

/// Messages delivered at most this many times before they go to the dead-letter queue
/// (the SAM template's `maxReceiveCount` says the same for SQS).
pub const MAX_RECEIVES: u32 = 3;
/// Largest batch the local server's queues take at once (the Lambda event sources take 1: a
/// run that reaches its invocation's time limit then ends only itself).
pub const BATCH_SIZE: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueName {
    /// Document parsing and indexing.
    Ingest,
    /// Long-term memory extraction.
    Memory,
}

/// A worker: takes a batch, answers with the ids of the messages that failed. An `Err` fails
/// the whole batch, as a Lambda error would.
pub type BatchHandler =
    Arc<dyn Fn(SqsEvent, StopAt) -> BoxFuture<'static, anyhow::Result<SqsBatchResponse>> + Send + Sync>;

/// When a batch's work must stop so that the worker can still answer: its Lambda invocation's
/// deadline less a margin; none inside the local server. A function Lambda stops at its timeout
/// fails its whole batch without a word of why; stopped here, its unfinished messages are
/// reported failed one by one (retried as usual) and the worker can say what ran out.
pub type StopAt = Option<tokio::time::Instant>;

#[async_trait]
pub trait Queue: Send + Sync {
    /// Queues `body` as work of `tenant` (whose it is: a user, an agent's partner traffic). On
    /// SQS the tenant is the message's group: a standard queue with groups is a fair queue, whose
    /// consumers are given a quiet tenant's messages before those of one with a backlog, so one
    /// user's thousand uploads do not hold up everyone else's for hours.
    async fn send(&self, queue: QueueName, tenant: &str, body: String) -> anyhow::Result<()>;
    /// Cheap reachability check for /health.
    async fn check(&self) -> anyhow::Result<()>;
    /// Delivers the queue's messages to `handler` inside this process until the process ends.
    fn start_worker(&self, queue: QueueName, handler: BatchHandler) -> tokio::task::JoinHandle<()>;
}

/// Builds the SQS message a worker sees, as the Lambda runtime would deliver it.
pub fn message(id: &str, body: &str, receive_count: u32, receipt: Option<String>) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.to_owned());
    m.body = Some(body.to_owned());
    m.receipt_handle = receipt;
    m.event_source = Some("aws:sqs".to_owned());
    m.attributes
        .insert("ApproximateReceiveCount".to_owned(), receive_count.to_string());
    m
}

/// The message attribute naming the request a message was sent in (its `x-request-id`).
pub const REQUEST_ID: &str = "requestId";

/// Where a message was sent from, carried in its attributes: the trace (with traces on) and the
/// request, so the worker's spans and log lines name what queued the work.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub traceparent: Option<String>,
    pub request_id: Option<String>,
}

impl Origin {
    /// The current span's.
    pub fn current() -> Self {
        Self {
            traceparent: crate::telemetry::traceparent(),
            request_id: crate::telemetry::request_id(),
        }
    }

    /// As message attributes, by name.
    pub fn attributes(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            (crate::telemetry::TRACEPARENT, self.traceparent.as_deref()),
            (REQUEST_ID, self.request_id.as_deref()),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
    }
}

/// Attaches where a message was sent from as its attributes, where SQS carries them too.
pub fn with_origin(mut m: SqsMessage, origin: &Origin) -> SqsMessage {
    for (name, value) in origin.attributes() {
        let mut attribute = SqsMessageAttribute::default();
        attribute.string_value = Some(value.to_owned());
        attribute.data_type = Some("String".to_owned());
        m.message_attributes.insert(name.to_owned(), attribute);
    }
    m
}

fn attribute<'m>(m: &'m SqsMessage, name: &str) -> Option<&'m str> {
    m.message_attributes.get(name).and_then(|a| a.string_value.as_deref())
}

pub fn event(records: Vec<SqsMessage>) -> SqsEvent {
    let mut e = SqsEvent::default();
    e.records = records;
    e
}

/// Message ids a worker reported as failed; every id when the handler itself failed.
pub fn failed_ids(event: &SqsEvent, outcome: &anyhow::Result<SqsBatchResponse>) -> Vec<String> {
    match outcome {
        Ok(resp) => resp
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect(),
        Err(err) => {
            tracing::error!(error = ?err, "worker failed the whole batch");
            event.records.iter().filter_map(|m| m.message_id.clone()).collect()
        }
    }
}

/// A worker that runs `process` on every message of a batch concurrently, failures reported
/// one by one (redelivered, then dead-lettered after `MAX_RECEIVES`). `context` (the service's
/// state) and the batch's `StopAt` (for work that must end on its own terms before then) are
/// handed to every call.
pub fn per_message<C, Fut>(context: C, process: fn(C, SqsMessage, StopAt) -> Fut) -> BatchHandler
where
    C: Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    Arc::new(move |event, stop_at| {
        let context = context.clone();
        Box::pin(async move { Ok(for_each_message(event, stop_at, |m| process(context.clone(), m, stop_at)).await) })
    })
}

/// Runs `work` on every message of a batch concurrently and reports the failures, the shape
/// every worker answers with; work still running at `stop_at` is stopped and reported failed.
/// Each message is worked on in a span of the trace it was sent in.
pub async fn for_each_message<F, Fut>(event: SqsEvent, stop_at: StopAt, work: F) -> SqsBatchResponse
where
    F: Fn(SqsMessage) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let runs = event.records.into_iter().map(|m| {
        let id = m.message_id.clone().unwrap_or_default();
        let span = tracing::info_span!(
            "process_message",
            otel.kind = "consumer",
            messaging.system = "aws_sqs",
            messaging.operation.type = "process",
            messaging.message.id = %id,
            trace_id = tracing::field::Empty,
            request_id = tracing::field::Empty,
        );
        crate::telemetry::continue_message_trace(&span, attribute(&m, crate::telemetry::TRACEPARENT));
        if let Some(request) = attribute(&m, REQUEST_ID) {
            span.record("request_id", tracing::field::display(request));
        }
        // A panic fails its message only (logged by the panic hook): unwound through the
        // batch, it ended the local server's consumer, and its queue with it, until a restart.
        let fut = std::panic::AssertUnwindSafe(work(m))
            .catch_unwind()
            .map(|outcome| outcome.unwrap_or_else(|_| Err(anyhow::anyhow!("the work on it panicked"))))
            .instrument(span);
        async move {
            let Some(at) = stop_at else {
                return (id, fut.await);
            };
            let outcome = tokio::time::timeout_at(at, fut)
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("stopped unfinished: the invocation's time was up")));
            (id, outcome)
        }
    });
    let mut response = SqsBatchResponse::default();
    for (id, outcome) in futures::future::join_all(runs).await {
        if let Err(err) = outcome {
            tracing::warn!(message_id = %id, error = ?err, "message failed; it will be retried");
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_fails_its_message_only() {
        let batch = event(vec![message("calm", "ok", 1, None), message("wild", "panic", 1, None)]);
        let response = for_each_message(batch, None, |m| async move {
            if m.body.as_deref() == Some("panic") {
                panic!("a bug in the work");
            }
            Ok(())
        })
        .await;
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, ["wild"]);
    }
}
