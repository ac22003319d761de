//! Streamed answers: a stream fed by a spawned task.

use std::future::Future;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A stream fed by a spawned task through `Sender`. When the client goes away the receiver is
/// dropped: sends fail and `Sender::closed` resolves, so the task can stop its upstream work.
/// The task is not run in the caller's span: a body that belongs to the request's trace takes the
/// span along itself, all of it (`in_current_span`) or the parts that open spans, log or call out
/// (the chat turn: its task is polled at every token, and entering a span at each poll costs
/// every layer of the subscriber a lookup of the span).
pub fn spawn_stream<E, F, Fut>(body: F) -> BoxStream<'static, E>
where
    E: Send + 'static,
    F: FnOnce(mpsc::Sender<E>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    spawn_joined_stream(body).0
}

/// `spawn_stream`, with the task's handle: whoever drops the stream can wait for a body that
/// stops on `Sender::closed` to have stopped.
pub fn spawn_joined_stream<E, F, Fut>(body: F) -> (BoxStream<'static, E>, JoinHandle<()>)
where
    E: Send + 'static,
    F: FnOnce(mpsc::Sender<E>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel(64);
    // The stream ends only after the task, and any span it holds, is gone: whoever waits for
    // the end (a Lambda function flushing its spans) then finds the spans ended.
    let keep_open = tx.clone();
    // Boxed here, once: a stream's task can be a large future (a chat turn's was 57 KB), and
    // spawning it by value copied it several times on its way into the task (about 60,000
    // instructions per chat then).
    let task = Box::pin(body(tx));
    let handle = tokio::spawn(async move {
        task.await;
        drop(keep_open);
    });
    (futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed(), handle)
}
