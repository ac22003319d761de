//! Streamed responses: the headers every stream carries, and pieces written together when
//! more than one is ready.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use bytes::BytesMut;
use futures::{Stream, StreamExt};

use crate::{AppError, AppResult};

/// A streamed response of `pieces` (lines, text) that proxies must not buffer.
pub fn response<S>(content_type: &'static str, pieces: S) -> AppResult<Response>
where
    S: Stream + Send + 'static,
    S::Item: Into<Bytes>,
{
    let corked = Corked::new(pieces.map(Into::into).boxed());
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(corked.map(Ok::<_, std::convert::Infallible>)))
        .map_err(|e| AppError::Internal(e.into()))
}

/// The pieces of a stream, each write taking every piece that is ready.
///
/// The server writes what a poll of the body returns, one socket write per poll that finds
/// something. A streamed answer produces a line per token in another task, so each poll found
/// one line: one write per token, 50 per 50-token answer, even on a server so busy that the
/// next tokens were already on their way. After the first piece (written at once: the first
/// token is what a reader waits for), a piece waits for one turn of the scheduler before it is
/// written, and whatever was produced meanwhile goes in the same write. At a model's own pace
/// that turn is microseconds and every token still gets its own write; on a busy server the
/// tokens that are ready share one.
struct Corked {
    pieces: futures::stream::BoxStream<'static, Bytes>,
    ready: BytesMut,
    first_sent: bool,
    waited: bool,
    ended: bool,
}

impl Corked {
    fn new(pieces: futures::stream::BoxStream<'static, Bytes>) -> Self {
        Self {
            pieces,
            ready: BytesMut::new(),
            first_sent: false,
            waited: false,
            ended: false,
        }
    }
}

impl Stream for Corked {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = &mut *self;
        while !this.ended {
            match this.pieces.poll_next_unpin(cx) {
                Poll::Ready(Some(piece)) => this.ready.extend_from_slice(&piece),
                Poll::Ready(None) => this.ended = true,
                Poll::Pending => break,
            }
        }
        if this.ready.is_empty() {
            return match this.ended {
                true => Poll::Ready(None),
                false => Poll::Pending,
            };
        }
        if this.first_sent && !this.ended && !this.waited {
            this.waited = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.first_sent = true;
        this.waited = false;
        Poll::Ready(Some(this.ready.split().freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_piece_goes_alone_and_later_ready_pieces_go_together() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<&'static str>();
        let mut corked = Corked::new(rx.map(Bytes::from).boxed());
        tx.unbounded_send("a\n").unwrap();
        tx.unbounded_send("b\n").unwrap();
        assert_eq!(corked.next().await.unwrap(), "a\nb\n");
        // "d" comes from another task while "c" waits its turn of the scheduler.
        tx.unbounded_send("c\n").unwrap();
        let producer = tx.clone();
        tokio::spawn(async move { producer.unbounded_send("d\n").unwrap() });
        assert_eq!(corked.next().await.unwrap(), "c\nd\n");
        tx.unbounded_send("e\n").unwrap();
        drop(tx);
        assert_eq!(corked.next().await.unwrap(), "e\n");
        assert!(corked.next().await.is_none());
    }
}
