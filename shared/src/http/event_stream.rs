//! Streamed responses: a body fed by a task, and the headers every stream carries.

use std::future::Future;

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::{AppError, AppResult};

/// A stream fed by a spawned task through `Sender`. When the client goes away the receiver is
/// dropped: sends fail and `Sender::closed` resolves, so the task can stop its upstream work.
pub fn spawn_stream<E, F, Fut>(body: F) -> BoxStream<'static, E>
where
    E: Send + 'static,
    F: FnOnce(mpsc::Sender<E>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel(64);
    tokio::spawn(body(tx));
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

/// A streamed response that proxies must not buffer.
pub fn response(content_type: &'static str, body: Body) -> AppResult<Response> {
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(body)
        .map_err(|e| AppError::Internal(e.into()))
}
