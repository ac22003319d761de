//! Streamed responses: the headers every stream carries, and pieces that come in a burst
//! written together.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use bytes::BytesMut;
use futures::{Stream, StreamExt};
use tokio::time::{Instant, Sleep};

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

/// The shortest time between two writes of one stream while pieces keep coming. At a model's
/// pace (tokens tens of milliseconds apart) every piece still goes out the moment it is made;
/// a burst (a fast model, a buffering proxy, a busy server catching up) goes out in writes this
/// far apart. Well under what a reader can see, and under a frame of a screen.
const WRITE_INTERVAL: Duration = Duration::from_millis(4);

/// What a stream may hold back before it writes anyway.
const MAX_HELD: usize = 16 * 1024;

/// The pieces of a stream, written together when they come faster than WRITE_INTERVAL.
///
/// The server writes what a poll of the body returns, one socket write per poll that finds
/// something. A streamed answer produces a line per token in another task, so each poll found
/// one line: about one write per token, and as many reads and wake-ups for the client, even
/// when the tokens came in a burst. A piece that comes when the last write is at least
/// WRITE_INTERVAL old (the first one above all: it is what a reader waits for) is written at
/// once; one that comes sooner waits until then, and whatever comes meanwhile joins it.
struct Corked {
    pieces: futures::stream::BoxStream<'static, Bytes>,
    ready: BytesMut,
    last_write: Option<Instant>,
    /// Wakes the stream when held pieces are due.
    due: Option<Pin<Box<Sleep>>>,
    ended: bool,
}

impl Corked {
    fn new(pieces: futures::stream::BoxStream<'static, Bytes>) -> Self {
        Self {
            pieces,
            ready: BytesMut::new(),
            last_write: None,
            due: None,
            ended: false,
        }
    }

    /// Whether held pieces must wait (a wake-up is then set for when they are due).
    fn must_wait(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(last) = self.last_write else {
            return false;
        };
        if self.ended || self.ready.len() >= MAX_HELD {
            return false;
        }
        let due_at = last + WRITE_INTERVAL;
        if Instant::now() >= due_at {
            return false;
        }
        let due = self
            .due
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due_at)));
        if due.deadline() != due_at {
            due.as_mut().reset(due_at);
        }
        due.as_mut().poll(cx).is_pending()
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
        if this.must_wait(cx) {
            return Poll::Pending;
        }
        this.last_write = Some(Instant::now());
        Poll::Ready(Some(this.ready.split().freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_piece_goes_at_once_and_a_burst_goes_together() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<&'static str>();
        let mut corked = Corked::new(rx.map(Bytes::from).boxed());
        tx.unbounded_send("a\n").unwrap();
        let start = Instant::now();
        assert_eq!(corked.next().await.unwrap(), "a\n");
        assert_eq!(start.elapsed(), Duration::ZERO);
        // "b" comes right after the first write: it waits for the interval, and "c", made
        // meanwhile by another task, joins it.
        tx.unbounded_send("b\n").unwrap();
        let producer = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            producer.unbounded_send("c\n").unwrap();
        });
        assert_eq!(corked.next().await.unwrap(), "b\nc\n");
        assert_eq!(start.elapsed(), WRITE_INTERVAL);
        // At a model's pace, a piece after a quiet interval goes at once.
        tokio::time::sleep(Duration::from_millis(20)).await;
        tx.unbounded_send("d\n").unwrap();
        let quiet = Instant::now();
        assert_eq!(corked.next().await.unwrap(), "d\n");
        assert_eq!(quiet.elapsed(), Duration::ZERO);
        // The end of the stream does not wait.
        tx.unbounded_send("e\n").unwrap();
        drop(tx);
        assert_eq!(corked.next().await.unwrap(), "e\n");
        assert!(corked.next().await.is_none());
        assert_eq!(quiet.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_larger_than_what_may_be_held_goes_at_once() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Bytes>();
        let mut corked = Corked::new(rx.boxed());
        tx.unbounded_send(Bytes::from_static(b"a")).unwrap();
        assert_eq!(corked.next().await.unwrap(), "a");
        let start = Instant::now();
        tx.unbounded_send(Bytes::from(vec![b'x'; MAX_HELD])).unwrap();
        assert_eq!(corked.next().await.unwrap().len(), MAX_HELD);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
