//! Streamed answers: a stream fed by a spawned task.

use std::future::Future;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::mpsc;
use tracing::Instrument;

/// A stream fed by a spawned task through `Sender`. When the client goes away the receiver is
/// dropped: sends fail and `Sender::closed` resolves, so the task can stop its upstream work.
/// The task runs in the caller's span, so what it does belongs to the request's trace.
pub fn spawn_stream<E, F, Fut>(body: F) -> BoxStream<'static, E>
where
    E: Send + 'static,
    F: FnOnce(mpsc::Sender<E>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel(64);
    // The stream ends only after the task has let go of the span: whoever waits for the end
    // (a Lambda function flushing its spans) then finds the span ended.
    let keep_open = tx.clone();
    let task = body(tx).instrument(tracing::Span::current());
    tokio::spawn(async move {
        task.await;
        drop(keep_open);
    });
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}
