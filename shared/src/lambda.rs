//! Lambda entry points of the workers and the scheduled job (the HTTP functions' are in
//! `http::lambda`): one call per function binary.

use std::time::{Duration, SystemTime};

use crate::AppState;

/// Serves an SQS-triggered worker: the batch handler answers with partial batch failures.
pub async fn run_sqs(worker: fn(AppState) -> crate::queue::BatchHandler) -> Result<(), lambda_runtime::Error> {
    use aws_lambda_events::event::sqs::SqsEvent;
    use lambda_runtime::{service_fn, LambdaEvent};

    let state = crate::startup::start()
        .await
        .map_err(|e| lambda_runtime::Error::from(format!("{e:#}")))?;
    let handler = worker(state);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let handler = handler.clone();
        let stop_at = stop_at(event.context.deadline());
        async move {
            let answer = handler(event.payload, Some(stop_at)).await;
            // The process may be frozen once the invocation returns.
            crate::telemetry::flush().await;
            answer.map_err(|e| lambda_runtime::Error::from(format!("{e:#}")))
        }
    }))
    .await
}

/// What a worker keeps of its invocation to answer after its work is stopped: the batch
/// response and the flush of its traces.
const ANSWER_MARGIN: Duration = Duration::from_secs(5);

/// When a batch's work must stop: the invocation's deadline less `ANSWER_MARGIN`, read on the
/// runtime's clock (a deadline already past stops the work at once).
fn stop_at(deadline: SystemTime) -> tokio::time::Instant {
    let left = deadline.duration_since(SystemTime::now()).unwrap_or_default();
    tokio::time::Instant::now() + left.saturating_sub(ANSWER_MARGIN)
}

/// Serves a scheduled job (an EventBridge rule): the event itself carries nothing the job
/// needs; an error makes the invocation fail, so Lambda retries it.
pub async fn run_scheduled(
    job: fn(AppState) -> futures::future::BoxFuture<'static, anyhow::Result<()>>,
) -> Result<(), lambda_runtime::Error> {
    use lambda_runtime::{service_fn, LambdaEvent};

    let state = crate::startup::start()
        .await
        .map_err(|e| lambda_runtime::Error::from(format!("{e:#}")))?;
    lambda_runtime::run(service_fn(move |_event: LambdaEvent<serde_json::Value>| {
        let state = state.clone();
        async move {
            let done = job(state).await;
            crate::telemetry::flush().await;
            done.map_err(|e| lambda_runtime::Error::from(format!("{e:#}")))
        }
    }))
    .await
}
