//! Why a model call failed, in words a person can act on.

use reqwest::StatusCode;
use serde_json::Value;

use super::snippet;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    #[error("the model endpoint rejected the API key: {0}")]
    Auth(String),
    #[error("the model or endpoint path was not found: {0}")]
    NotFound(String),
    #[error("the model endpoint is rate limiting: {0}")]
    RateLimited(String),
    #[error("the model endpoint timed out: {0}")]
    Timeout(String),
    #[error("the model endpoint cannot be reached: {0}")]
    Network(String),
    #[error("the model endpoint failed (HTTP {status}): {message}")]
    Upstream { status: u16, message: String },
    #[error("the model endpoint rejected the request: {0}")]
    BadRequest(String),
    #[error("the model endpoint answered something unexpected: {0}")]
    Protocol(String),
    /// The call was to run on an app's client nodes and none could take it: `full` names the
    /// app, `brief` says "this agent's app" (an agent's app is shown only to its creator and
    /// administrators).
    #[error("{full}")]
    NoClientNode { full: String, brief: String },
}

impl ModelError {
    /// A short, fixed name of the failure, for a span's `error.type`: the message holds the
    /// endpoint's words, which a trace backend would count as a new type each.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Auth(_) => "auth",
            Self::NotFound(_) => "not_found",
            Self::RateLimited(_) => "rate_limited",
            Self::Timeout(_) => "timeout",
            Self::Network(_) => "network",
            Self::Upstream { .. } => "upstream",
            Self::BadRequest(_) => "bad_request",
            Self::Protocol(_) => "protocol",
            Self::NoClientNode { .. } => "no_client_node",
        }
    }

    /// A call no client node of app `app_id` took, `why` worded around the app's name.
    pub fn no_client_node(app_id: &str, why: impl Fn(&str) -> String) -> Self {
        Self::NoClientNode {
            full: why(&format!("app {app_id}")),
            brief: why("this agent's app"),
        }
    }

    pub(crate) fn from_status(status: StatusCode, body: &str) -> Self {
        let detail = upstream_message(body).unwrap_or_else(|| snippet(body));
        let detail = if detail.is_empty() {
            format!("HTTP {}", status.as_u16())
        } else {
            detail
        };
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Self::Auth(detail),
            StatusCode::NOT_FOUND => Self::NotFound(detail),
            StatusCode::TOO_MANY_REQUESTS => Self::RateLimited(detail),
            s if s.is_client_error() => Self::BadRequest(detail),
            s => Self::Upstream {
                status: s.as_u16(),
                message: detail,
            },
        }
    }

    /// `url` is the address as errors show it; the error's own (query and all, where some
    /// providers take a key) is dropped.
    pub(crate) fn from_transport(url: &str, err: reqwest::Error) -> Self {
        let err = err.without_url();
        if err.is_timeout() {
            return Self::Timeout(format!("{url}: {err}"));
        }
        // The source chain says whether DNS, refusal or TLS failed; the address is said once.
        let mut detail = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(s) = source {
            detail = format!("{detail}: {s}");
            source = s.source();
        }
        Self::Network(format!("{url}: {detail}"))
    }

    /// What failed, without anything the endpoint or the network said: for people who did not
    /// configure the endpoint, to whom its answers (an internal service's error page, say)
    /// must not be relayed.
    pub fn brief(&self) -> String {
        match self {
            Self::Auth(_) => "the model endpoint rejected the API key".into(),
            Self::NotFound(_) => "the model or endpoint path was not found".into(),
            Self::RateLimited(_) => "the model endpoint is rate limiting".into(),
            Self::Timeout(_) => "the model endpoint timed out".into(),
            Self::Network(_) => "the model endpoint cannot be reached".into(),
            Self::Upstream { status, .. } => format!("the model endpoint failed (HTTP {status})"),
            Self::BadRequest(_) => "the model endpoint rejected the request".into(),
            Self::Protocol(_) => "the model endpoint answered something unexpected".into(),
            Self::NoClientNode { brief, .. } => brief.clone(),
        }
    }

    /// What someone chatting is told: the whole error when they configured the model (it is
    /// theirs to fix), `brief` for anyone else.
    pub fn told_to(&self, configured_it: bool) -> String {
        match configured_it {
            true => self.to_string(),
            false => self.brief(),
        }
    }

    /// Worth another attempt before anything was received.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Timeout(_) | Self::Network(_) | Self::RateLimited(_) | Self::Upstream { .. }
        )
    }

    /// Worth another delivery of queued work: what `is_retryable` tries again within a call,
    /// and an answer that was not what was asked for (a proxy's error page sent with 200, a
    /// stream cut short), which the next try may not meet. A refused key, model or request
    /// answers the same every time.
    pub fn may_pass(&self) -> bool {
        self.is_retryable() || matches!(self, Self::Protocol(_))
    }
}

/// The `error.message` (or `message`, `detail`) of an OpenAI-style error body.
pub(crate) fn upstream_message(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    let msg = v
        .pointer("/error/message")
        .or_else(|| v.get("error").filter(|e| e.is_string()))
        .or_else(|| v.get("message"))
        .or_else(|| v.get("detail"))?;
    msg.as_str().map(snippet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_work_tries_again_only_what_may_pass() {
        for passing in [
            StatusCode::BAD_GATEWAY,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
        ] {
            assert!(ModelError::from_status(passing, "").may_pass(), "{passing}");
        }
        assert!(ModelError::Protocol("an HTML page".into()).may_pass());
        for fixed in [StatusCode::UNAUTHORIZED, StatusCode::NOT_FOUND, StatusCode::BAD_REQUEST] {
            assert!(!ModelError::from_status(fixed, "").may_pass(), "{fixed}");
        }
    }

    #[test]
    fn statuses_map_to_actionable_kinds() {
        let e = ModelError::from_status(StatusCode::UNAUTHORIZED, r#"{"error":{"message":"Incorrect API key"}}"#);
        assert_eq!(
            e.to_string(),
            "the model endpoint rejected the API key: Incorrect API key"
        );
        assert!(matches!(
            ModelError::from_status(StatusCode::NOT_FOUND, "nope"),
            ModelError::NotFound(_)
        ));
        assert!(ModelError::from_status(StatusCode::BAD_GATEWAY, "").is_retryable());
        let leaky = ModelError::from_status(StatusCode::BAD_REQUEST, r#"{"message":"internal secret page"}"#);
        assert_eq!(leaky.brief(), "the model endpoint rejected the request");
        assert!(!ModelError::from_status(StatusCode::BAD_REQUEST, "").is_retryable());
        // The span's type names the kind, never the endpoint's words.
        assert_eq!(e.kind(), "auth");
        assert_eq!(ModelError::from_status(StatusCode::BAD_GATEWAY, "x").kind(), "upstream");
    }

    /// A timed-out request's error carries its whole URL; the message keeps only the address
    /// it was given.
    #[tokio::test]
    async fn a_timeout_does_not_repeat_the_query_of_the_endpoint() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        let err = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/v1/embeddings?api-key=SECRET"))
            .timeout(std::time::Duration::from_millis(50))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_timeout());
        let e = ModelError::from_transport(&format!("http://127.0.0.1:{port}/v1/embeddings"), err);
        assert!(matches!(e, ModelError::Timeout(_)), "{e}");
        assert!(!e.to_string().contains("SECRET"), "{e}");
    }
}
