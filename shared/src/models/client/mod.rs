//! The model client layer: OpenAI-compatible chat (streamed and not), embeddings, and
//! Jina/Cohere-shaped rerank. One `reqwest` connection pool per process; retries happen only
//! before the first response byte, so a streamed answer is never sent twice.

mod chat;
mod chunk;
mod embed;
mod error;
mod rerank;

use crate::outbound::{Outbound, PerReach, Reach};
use crate::upstream::{read_body, BodyError, MAX_BODY_BYTES, MAX_ERROR_BODY_BYTES};
use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::Response;
use serde::Serialize;
use serde_json::Value;

pub use chat::*;
pub use embed::{Embeddings, InputKind};
pub use error::ModelError;
pub use rerank::{RerankHit, Reranking};

/// Where and how to call one model: the decrypted view of a model config.
#[derive(Clone)]
pub struct Endpoint {
    pub base_url: String,
    pub api_key: String,
    pub model: String,
    /// The config's `configJson`: temperature, maxTokens, timeoutSecs, batchSize, input types ...
    pub options: Value,
    /// Who configured the endpoint, which decides the networks the call may reach.
    pub reach: Reach,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// An endpoint's address as errors and logs show it: without its query, where some providers
/// take a key (`?key=`, `?api-key=`).
fn shown(url: &str) -> &str {
    url.split_once('?').map_or(url, |(address, _)| address)
}

impl Endpoint {
    /// `{base}/{path}`, unless the configured endpoint already ends with the path's segments
    /// (a base ending in `bge-rerank` or `text-embeddings` does not name `/rerank` or
    /// `/embeddings`). A query
    /// of the endpoint (`?api-version=`, `?key=`) stays at the end: written after it, the path
    /// became part of the query's last value.
    fn url(&self, path: &str) -> String {
        let (address, query) = match self.base_url.split_once('?') {
            Some((address, query)) => (address, Some(query)),
            None => (self.base_url.as_str(), None),
        };
        let base = address.trim_end_matches('/');
        let full = match base.ends_with(&format!("/{path}")) {
            true => base.to_owned(),
            false => format!("{base}/{path}"),
        };
        match query {
            Some(q) => format!("{full}?{q}"),
            None => full,
        }
    }

    pub(crate) fn option_u64(&self, key: &str) -> Option<u64> {
        self.options.get(key).and_then(Value::as_u64)
    }

    fn option_f64(&self, key: &str) -> Option<f64> {
        self.options.get(key).and_then(Value::as_f64)
    }

    fn option_str(&self, key: &str) -> Option<&str> {
        self.options.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
    }

    /// How long to wait for the first byte, and between stream chunks.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.option_u64("timeoutSecs").unwrap_or(60).clamp(1, 600))
    }

    fn max_retries(&self) -> u32 {
        self.option_u64("maxRetries").unwrap_or(2).min(5) as u32
    }
}

#[derive(Clone)]
pub struct ModelClient {
    /// By the reach of the endpoint called.
    http: PerReach<reqwest::Client>,
    outbound: Outbound,
}

impl Default for ModelClient {
    fn default() -> Self {
        Self::new()
    }
}

impl ModelClient {
    pub fn new() -> Self {
        Self::guarded(&Outbound::default())
    }

    /// A client that never connects to the networks denied to each endpoint's reach (see
    /// [`crate::outbound`]).
    pub fn guarded(outbound: &Outbound) -> Self {
        let http = PerReach::new(|reach| {
            let builder = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .pool_idle_timeout(Duration::from_secs(90))
                .tcp_nodelay(true)
                .user_agent(concat!("agent-platform/", env!("CARGO_PKG_VERSION")));
            outbound
                .deny(reach)
                .guard(builder)
                .build()
                .unwrap_or_else(|_| reqwest::Client::new())
        });
        Self {
            http,
            outbound: outbound.clone(),
        }
    }

    /// The shared HTTP client for calls to addresses the operator configured (store probes,
    /// web search, the document converter).
    pub fn http(&self) -> &reqwest::Client {
        self.http.get(Reach::Operator)
    }

    /// Sends a JSON POST, retrying connection failures, timeouts before the response, 429 and
    /// 5xx. Returns the first successful response with its body still unread.
    async fn post(&self, ep: &Endpoint, path: &str, body: &(impl Serialize + Sync)) -> Result<Response, ModelError> {
        let url = ep.url(path);
        let denied = reqwest::Url::parse(&url)
            .ok()
            .and_then(|u| self.outbound.deny(ep.reach).denied_literal(&u));
        if let Some(ip) = denied {
            return Err(ModelError::Network(format!(
                "{}: {ip} is in a network the service may not call",
                shown(&url)
            )));
        }
        let mut attempt = 0;
        loop {
            match self.try_post(ep, &url, body).await {
                Ok(resp) => return Ok(resp),
                Err((err, wait)) if err.is_retryable() && attempt < ep.max_retries() => {
                    attempt += 1;
                    tracing::debug!(url = shown(&url), attempt, error = %err, "retrying model call");
                    tokio::time::sleep(wait.unwrap_or_else(|| backoff(attempt))).await;
                }
                Err((err, _)) => return Err(err),
            }
        }
    }

    /// One attempt; a failure carries the wait the upstream asked for, if any.
    async fn try_post(
        &self,
        ep: &Endpoint,
        url: &str,
        body: &(impl Serialize + Sync),
    ) -> Result<Response, (ModelError, Option<Duration>)> {
        let mut trace = HeaderMap::new();
        crate::telemetry::inject(&mut trace);
        let request = self
            .http
            .get(ep.reach)
            .post(url)
            .bearer_auth(&ep.api_key)
            .headers(trace)
            .json(body);
        let resp = match tokio::time::timeout(ep.timeout(), request.send()).await {
            Err(_) => {
                return Err((
                    ModelError::Timeout(format!("no response from {} within {:?}", shown(url), ep.timeout())),
                    None,
                ))
            }
            Ok(Err(e)) => return Err((ModelError::from_transport(shown(url), e), None)),
            Ok(Ok(resp)) => resp,
        };
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let wait = retry_after(resp.headers());
        let text = read_error_body(resp, ep.timeout()).await;
        Err((ModelError::from_status(status, &text), wait))
    }

    /// Posts and reads the whole JSON answer.
    async fn post_json(&self, ep: &Endpoint, path: &str, body: &(impl Serialize + Sync)) -> Result<Value, ModelError> {
        let resp = self.post(ep, path, body).await?;
        let bytes = tokio::time::timeout(ep.timeout(), read_body(resp, MAX_BODY_BYTES))
            .await
            .map_err(|_| ModelError::Timeout("the model endpoint stopped sending its answer".into()))?
            .map_err(|e| match e {
                BodyError::TooLarge(_) => ModelError::Protocol(e.to_string()),
                BodyError::Network(e) => ModelError::Network(format!("reading the answer failed: {e}")),
            })?;
        serde_json::from_slice(&bytes).map_err(|_| {
            ModelError::Protocol(format!(
                "the answer is not JSON: {}",
                snippet(&String::from_utf8_lossy(&bytes))
            ))
        })
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(200 * 2u64.pow(attempt.saturating_sub(1)))
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: u64 = headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(secs.min(5)))
}

async fn read_error_body(resp: Response, limit: Duration) -> String {
    match tokio::time::timeout(limit, read_body(resp, MAX_ERROR_BODY_BYTES)).await {
        Ok(Ok(body)) => String::from_utf8_lossy(&body).into_owned(),
        _ => String::new(),
    }
}

/// At most 300 characters of upstream text, for messages.
/// The most tokens one call is taken to have used, whatever its endpoint (or client node)
/// reports: far above any real call, and low enough that no sum or conversion the service
/// makes with it can overflow. A count near 2^64 would otherwise wrap to a negative charge and
/// hand its reporter a quota.
pub const MAX_REPORTED_TOKENS: u64 = 1 << 32;

/// The most a streamed answer kept to be stored (a chat's text and reasoning together, a Q&A
/// answer) may hold. The model is sent `max_tokens`, but nothing makes an endpoint keep to it:
/// one that streamed without end would grow until the process ran out of memory, and stored,
/// fill the database at the price of the tokens it reported.
pub const MAX_ANSWER_BYTES: usize = 4 << 20;

/// An answer of `bytes` kept so far, refused past `MAX_ANSWER_BYTES` with why.
pub fn check_answer_size(bytes: usize) -> Result<(), String> {
    if bytes > MAX_ANSWER_BYTES {
        return Err(format!(
            "the model's answer passed {} MiB and was cut off there",
            MAX_ANSWER_BYTES >> 20
        ));
    }
    Ok(())
}

/// A token count as reported, capped at MAX_REPORTED_TOKENS.
pub fn reported_tokens(count: Option<u64>) -> u64 {
    count.unwrap_or(0).min(MAX_REPORTED_TOKENS)
}

/// The start of an endpoint's answer, on one line: it is logged, and a line break in it could
/// forge a log line of its own in the plain-text format.
pub(crate) fn snippet(text: &str) -> String {
    crate::text::excerpt(text.trim(), 300).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::{shown, Endpoint};

    fn at(base_url: &str) -> Endpoint {
        Endpoint {
            base_url: base_url.to_owned(),
            api_key: String::new(),
            model: "m".to_owned(),
            options: serde_json::Value::Null,
            reach: Default::default(),
        }
    }

    #[test]
    fn the_path_goes_before_the_endpoints_query() {
        let cases = [
            ("https://h/v1", "https://h/v1/chat/completions"),
            ("https://h/v1/", "https://h/v1/chat/completions"),
            ("https://h/v1/chat/completions", "https://h/v1/chat/completions"),
            (
                "https://h/v1?api-version=2024-06-01",
                "https://h/v1/chat/completions?api-version=2024-06-01",
            ),
            (
                "https://h/v1/chat/completions?key=K",
                "https://h/v1/chat/completions?key=K",
            ),
        ];
        for (base, want) in cases {
            assert_eq!(at(base).url("chat/completions"), want, "{base}");
        }
    }

    #[test]
    fn a_base_named_like_the_path_still_gets_it() {
        assert_eq!(at("https://h/bge-rerank").url("rerank"), "https://h/bge-rerank/rerank");
        assert_eq!(at("https://h/v1/rerank").url("rerank"), "https://h/v1/rerank");
        assert_eq!(
            at("https://h/text-embeddings").url("embeddings"),
            "https://h/text-embeddings/embeddings"
        );
    }

    #[test]
    fn an_address_is_shown_without_its_query() {
        assert_eq!(
            shown("https://h/v1/chat/completions?api-key=sk-1"),
            "https://h/v1/chat/completions"
        );
        assert_eq!(shown("http://h:8000/v1/embeddings"), "http://h:8000/v1/embeddings");
    }
}
