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
        .map_err(|e| SseError::Failed(format!("cannot open the event stream: {e}")))?;
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
        while let Some(Ok(ev)) = events.next().await {
            if ev.event != "message" && !ev.event.is_empty() {
                continue;
            }
            match serde_json::from_str::<ServerJsonRpcMessage>(&ev.data) {
                Ok(msg) => {
                    if tx.send(msg).await.is_err() {
                        break;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "MCP SSE: ignoring a message that is not JSON-RPC"),
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
                .map_err(|e| SseError::Failed(format!("cannot post a message: {e}")))?;
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

#[derive(Debug, Default, PartialEq, Eq)]
struct Event {
    event: String,
    data: String,
}

/// Splits a byte stream into server-sent events (fields `event` and `data`; others ignored).
fn events<E: std::fmt::Display>(
    bytes: impl Stream<Item = Result<bytes::Bytes, E>>,
) -> impl Stream<Item = Result<Event, String>> {
    let parser = Parser::default();
    bytes
        .scan(parser, |parser, chunk| {
            let out: Vec<Result<Event, String>> = match chunk {
                Ok(b) => parser.feed(&b).into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e.to_string())],
            };
            futures::future::ready(Some(futures::stream::iter(out)))
        })
        .flatten()
}

#[derive(Default)]
struct Parser {
    pending: Vec<u8>,
    current: Event,
    has_data: bool,
}

impl Parser {
    fn feed(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(pos) = self.pending.iter().position(|b| *b == b'\n') {
            let raw: Vec<u8> = self.pending.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if self.has_data {
                    out.push(std::mem::take(&mut self.current));
                }
                self.current = Event::default();
                self.has_data = false;
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => self.current.event = value.to_owned(),
                "data" => {
                    if self.has_data {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(value);
                    self.has_data = true;
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_across_chunks() {
        let mut p = Parser::default();
        assert!(p.feed(b"event: endpoint\r\nda").is_empty());
        let evs = p.feed(b"ta: /message?sessionId=1\r\n\r\n: ping\n\ndata: {\"a\":\ndata: 1}\n\n");
        assert_eq!(
            evs,
            vec![
                Event {
                    event: "endpoint".into(),
                    data: "/message?sessionId=1".into()
                },
                Event {
                    event: String::new(),
                    data: "{\"a\":\n1}".into()
                },
            ]
        );
    }
}
