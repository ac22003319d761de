//! The client side of the legacy HTTP+SSE transport (transportType 1), which rmcp no longer
//! ships: a long-lived `GET` event stream whose first `endpoint` event names the URL that
//! messages are `POST`ed to; replies arrive as `message` events on the stream.

use std::future::Future;
use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, ACCEPT};
use reqwest::{StatusCode, Url};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleClient;
use rmcp::transport::Transport;
use tokio::sync::mpsc;

use crate::upstream::{SseDecoder, SseEvent};

#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("HTTP {0}: the server refused the credentials")]
    Unauthorized(u16),
    #[error("{0}")]
    Failed(String),
}

pub struct SseTransport {
    http: reqwest::Client,
    post_url: Url,
    headers: HeaderMap,
    post_timeout: Duration,
    inbox: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn refused(status: StatusCode) -> SseError {
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => SseError::Unauthorized(status.as_u16()),
        other => SseError::Failed(format!("HTTP {other}")),
    }
}

/// Opens the event stream and waits for the `endpoint` event. `headers` (the credentials) go
/// with every request, so the message URL must stay on the stream's origin.
pub async fn connect(
    http: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    post_timeout: Duration,
) -> Result<SseTransport, SseError> {
    let base = Url::parse(url).map_err(|e| SseError::Failed(format!("bad endpoint URL: {e}")))?;
    let resp = http
        .get(base.clone())
        .headers(headers.clone())
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        // Without its URL: some providers put the key in the path (`.../mcp/<key>/sse`).
        .map_err(|e| SseError::Failed(format!("cannot open the event stream: {}", e.without_url())))?;
    if !resp.status().is_success() {
        return Err(refused(resp.status()));
    }
    let mut events = Box::pin(events(resp.bytes_stream()));
    let endpoint = loop {
        match events.next().await {
            Some(Ok(ev)) if ev.event == "endpoint" => break ev.data,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(SseError::Failed(format!("event stream failed: {e}"))),
            None => {
                return Err(SseError::Failed(
                    "the event stream ended before naming its message endpoint".into(),
                ))
            }
        }
    };
    let post_url = base
        .join(endpoint.trim())
        .map_err(|e| SseError::Failed(format!("bad message endpoint {endpoint:?}: {e}")))?;
    if post_url.origin() != base.origin() {
        return Err(SseError::Failed(
            "the server named a message endpoint on another origin; refusing to send credentials there".into(),
        ));
    }
    let (tx, inbox) = mpsc::channel(64);
    let reader = tokio::spawn(async move {
        let mut ignored = 0;
        while let Some(next) = events.next().await {
            let ev = match next {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(error = %e, "MCP SSE: the event stream failed; the session ends");
                    break;
                }
            };
            if ev.event != "message" && !ev.event.is_empty() {
                continue;
            }
            match serde_json::from_str::<ServerJsonRpcMessage>(&ev.data) {
                Ok(msg) => {
                    ignored = 0;
                    if tx.send(msg).await.is_err() {
                        break;
                    }
                }
                // A server sending nothing else would write a log line per event for as long
                // as the session lives.
                Err(e) => {
                    ignored += 1;
                    if ignored == MAX_IGNORED {
                        tracing::warn!(error = %e, "MCP SSE: {MAX_IGNORED} messages in a row were not JSON-RPC; the session ends");
                        break;
                    }
                    tracing::warn!(error = %e, "MCP SSE: ignoring a message that is not JSON-RPC");
                }
            }
        }
    });
    Ok(SseTransport {
        http: http.clone(),
        post_url,
        headers,
        post_timeout,
        inbox,
        reader,
    })
}

/// Messages in a row a session ignores (not JSON-RPC) before it ends.
const MAX_IGNORED: u32 = 20;

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let request = self
            .http
            .post(self.post_url.clone())
            .headers(self.headers.clone())
            .timeout(self.post_timeout)
            .json(&item);
        async move {
            let resp = request
                .send()
                .await
                .map_err(|e| SseError::Failed(format!("cannot post a message: {}", e.without_url())))?;
            if resp.status().is_success() {
                Ok(())
            } else {
                Err(refused(resp.status()))
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.inbox.recv()
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.reader.abort();
        Ok(())
    }
}

/// The largest message an MCP server may send (an SSE line or event, on either HTTP
/// transport), below the model streams' caps: a message is parsed whole into JSON values, some
/// 16 times its size for an array of small numbers, and a user's own server sending 16 MiB
/// took a function of 256 MB (the local server: every module) with it. A tool list is read up
/// to 1 MiB and a result kept to `MCP_RESULT_MAX_BYTES`, so 2 MiB cuts nothing that is used.
pub const MAX_MESSAGE_BYTES: usize = 2 * 1024 * 1024;

/// Splits a byte stream into server-sent events; the stream ends after its first error.
fn events<E: std::fmt::Display>(
    bytes: impl Stream<Item = Result<bytes::Bytes, E>>,
) -> impl Stream<Item = Result<SseEvent, String>> {
    bytes
        .scan(
            Some(SseDecoder::with_limits(MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES)),
            |decoder, chunk| {
                let Some(parser) = decoder.as_mut() else {
                    return futures::future::ready(None);
                };
                let out: Vec<Result<SseEvent, String>> = match chunk.map(|b| parser.feed(&b)) {
                    Ok(Ok(events)) => events.into_iter().map(Ok).collect(),
                    Ok(Err(too_large)) => vec![Err(too_large.to_string())],
                    Err(e) => vec![Err(e.to_string())],
                };
                if out.iter().any(Result::is_err) {
                    *decoder = None;
                }
                futures::future::ready(Some(futures::stream::iter(out)))
            },
        )
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_stream_ends_with_an_error_past_the_message_cap() {
        let line = bytes::Bytes::from(vec![b'x'; MAX_MESSAGE_BYTES + 1]);
        let chunks = vec![
            Ok::<_, String>(bytes::Bytes::from_static(b"event: endpoint\ndata: /m\n\ndata: ")),
            Ok(line),
            Ok(bytes::Bytes::from_static(b"\n\ndata: later\n\n")),
        ];
        let got: Vec<_> = events(futures::stream::iter(chunks)).collect().await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].as_ref().map(|e| e.data.as_str()), Ok("/m"));
        let err = got[1].as_ref().unwrap_err();
        assert!(err.contains("a line larger than 2 MiB"), "{err}");
    }
}
