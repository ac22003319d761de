//! Opening one MCP session to a server over its transport, with its credentials applied.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use process_wrap::tokio::{CommandWrap, ProcessGroup};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::{AuthRequiredError, StreamableHttpClientTransportConfig};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::ServiceExt;

use super::oauth::{Credentials, TokenCache};
use super::process_group::EndGroupWithLeader;
use super::streamable::StreamableClient;
use super::{sse, AuthConfig, McpRow};
use crate::crypto::SecretBox;
use crate::outbound::Reach;
use crate::AppResult;

pub type Client = RunningService<RoleClient, ()>;

/// Variables a stdio server inherits from the service's environment; everything else it
/// gets comes from its envVars.
const INHERITED_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ"];

pub const SSE: i16 = 1;
pub const STREAMABLE_HTTP: i16 = 2;
pub const STDIO: i16 = 3;

#[derive(Clone)]
pub enum Transport {
    Sse(String),
    StreamableHttp(String),
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
}

/// A server's configuration with its secrets opened: everything needed to connect.
#[derive(Clone)]
pub struct Target {
    pub id: i64,
    pub name: String,
    /// The row's `update_dt`: a pooled session of an older configuration is replaced.
    pub version: DateTime<Utc>,
    pub transport: Transport,
    pub auth: AuthConfig,
    /// Who configured the server, which decides the networks its endpoints may reach.
    pub reach: Reach,
    /// Whose session this is: each person chatting gets their own, so what a stateful server
    /// keeps in a session (a stdio child's memory, a Streamable HTTP session's state) is never
    /// another's. `None` for the creator's own calls (test, tool list).
    pub party: Option<Party>,
}

/// Someone chatting, as the pool tells sessions apart: an admin-API user or a partner's end
/// user (the domain's `Owner`, which this floor does not see).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Party {
    User(i64),
    External(i64),
}

impl Target {
    pub fn open(row: &McpRow, secrets: &SecretBox) -> AppResult<Self> {
        let (auth, env) = row.open_secrets(secrets)?;
        let endpoint = row.endpoint.clone().unwrap_or_default();
        let transport = match row.transport_type {
            SSE => Transport::Sse(endpoint),
            STREAMABLE_HTTP => Transport::StreamableHttp(endpoint),
            _ => Transport::Stdio {
                command: row.command.clone().unwrap_or_default(),
                args: row.args.clone(),
                env,
            },
        };
        // A program takes no HTTP credentials; a stdio server saved with some before they were
        // refused would otherwise still fetch an OAuth2 token at every start, and fail to
        // start when its token URL did not answer.
        let auth = match transport {
            Transport::Stdio { .. } => AuthConfig::None,
            _ => auth,
        };
        Ok(Self {
            id: row.id,
            name: row.name.clone(),
            version: row.update_dt,
            transport,
            auth,
            reach: row.reach(),
            party: None,
        })
    }

    /// The same server, in `party`'s own session.
    pub fn for_party(self, party: Party) -> Self {
        Self {
            party: Some(party),
            ..self
        }
    }

    pub fn oauth(&self) -> Option<Credentials<'_>> {
        match &self.auth {
            AuthConfig::OAuth2 {
                client_id,
                client_secret,
                token_url,
            } => Some(Credentials {
                client_id,
                client_secret,
                token_url,
            }),
            _ => None,
        }
    }
}

/// Why a server could not be used. `unauthorized` marks a refusal of the credentials, which
/// for OAuth2 is retried once with a new token.
#[derive(Debug, Clone)]
pub struct Failure {
    pub message: String,
    pub unauthorized: bool,
    /// The server answered with a JSON-RPC error: the session itself is fine.
    pub protocol: bool,
    /// The server took longer than the limit: said in the service's own words, no address.
    pub timed_out: bool,
}

impl Failure {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            unauthorized: false,
            protocol: false,
            timed_out: false,
        }
    }

    /// Describes an error from its whole source chain; a 401/403 anywhere makes it `unauthorized`.
    pub fn from_error(context: &str, err: &(dyn std::error::Error + 'static)) -> Self {
        let mut parts = vec![tidy(&err.to_string())];
        let mut unauthorized = false;
        let mut cause = Some(err);
        while let Some(e) = cause {
            unauthorized |= e.downcast_ref::<AuthRequiredError>().is_some()
                || matches!(e.downcast_ref::<sse::SseError>(), Some(sse::SseError::Unauthorized(_)));
            let text = tidy(&e.to_string());
            unauthorized |= ["HTTP 401", "HTTP 403", "Auth required"]
                .iter()
                .any(|n| text.contains(n));
            if !parts.iter().any(|p| p.contains(&text)) {
                parts.push(text);
            }
            cause = e.source();
        }
        let mut message = format!("{context}: {}", parts.join(": "));
        if unauthorized {
            message.push_str(" (authentication failed: check authType and authConfig)");
        }
        Self {
            message,
            unauthorized,
            protocol: false,
            timed_out: false,
        }
    }

    /// `what` took longer than the limit.
    pub fn timed_out(what: impl Into<String>) -> Self {
        Self {
            timed_out: true,
            ..Self::new(what)
        }
    }

    /// A JSON-RPC error is the server's answer about the request, never a refusal of the
    /// credentials, whatever its message says ("GitHub API returned HTTP 403"): read as one,
    /// it dropped the token, ended the session other chats were using and ran the call again.
    pub fn from_service(context: &str, err: &ServiceError) -> Self {
        match err {
            ServiceError::McpError(_) => Self {
                protocol: true,
                ..Self::new(format!("{context}: {}", tidy(&err.to_string())))
            },
            _ => Self::from_error(context, err),
        }
    }
}

/// Drops rmcp's `Transport [<rust type>] error: ` prefixes, which tell a user nothing.
fn tidy(text: &str) -> String {
    let mut out = without_queries(text);
    while let Some(start) = out.find("Transport [") {
        let Some(len) = out[start..].find("] error: ") else {
            break;
        };
        out.replace_range(start..start + len + "] error: ".len(), "");
    }
    out
}

/// `text` with the query of every URL in it left out. The HTTP client names the URL of a
/// failed request, and some servers take their API key in its query: the message goes to the
/// server's `lastError`, the log and the traces.
fn without_queries(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + "://".len());
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ','))
            .unwrap_or(tail.len());
        let url = &tail[..end];
        out.push_str(url.split_once('?').map_or(url, |(address, _)| address));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// What a pooled session needs to know about its own freshness.
pub struct Opened {
    pub client: Client,
    /// For OAuth2: when the token it carries must be renewed (the session with it).
    pub renew_at: Option<Instant>,
}

/// The HTTP clients a session may use, both confined to the networks of the target's reach.
pub struct Clients<'a> {
    /// SSE streams and OAuth2 token requests.
    pub http: &'a reqwest::Client,
    /// The Streamable HTTP transport's.
    pub streamable: &'a StreamableClient,
}

pub async fn open(
    target: &Target,
    clients: Clients<'_>,
    tokens: &TokenCache,
    post_timeout: Duration,
) -> Result<Opened, Failure> {
    let http = clients.http;
    let (bearer, renew_at) = match (&target.auth, target.oauth()) {
        (AuthConfig::Bearer { token }, _) => (Some(token.clone()), None),
        (_, Some(creds)) => {
            // The token endpoint's address without its query, as every other failure's.
            let t = tokens.token(http, &creds).await.map_err(|m| Failure::new(tidy(&m)))?;
            (Some(t.access_token), Some(t.renew_at))
        }
        _ => (None, None),
    };
    let mut extra = HashMap::new();
    if let AuthConfig::ApiKey { key, value } = &target.auth {
        let name =
            HeaderName::from_bytes(key.as_bytes()).map_err(|_| Failure::new("authConfig.key is not a header name"))?;
        let value = HeaderValue::from_str(value).map_err(|_| Failure::new("authConfig.value is not a header value"))?;
        extra.insert(name, value);
    }
    let client = match &target.transport {
        Transport::StreamableHttp(url) => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(extra);
            config.max_sse_event_size = sse::MAX_MESSAGE_BYTES;
            if let Some(token) = bearer {
                config = config.auth_header(token);
            }
            let transport = StreamableHttpClientTransport::with_client(clients.streamable.clone(), config);
            ().serve(transport)
                .await
                .map_err(|e| Failure::from_error("cannot initialize the MCP session", &e))?
        }
        Transport::Sse(url) => {
            let mut headers: HeaderMap = extra.into_iter().collect();
            if let Some(token) = bearer {
                let value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| Failure::new("the bearer token is not a header value"))?;
                headers.insert(AUTHORIZATION, value);
            }
            let transport = sse::connect(http, url, headers, post_timeout)
                .await
                .map_err(|e| Failure::from_error("cannot open the SSE stream", &e))?;
            ().serve(transport)
                .await
                .map_err(|e| Failure::from_error("cannot initialize the MCP session", &e))?
        }
        Transport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            // The service's own environment holds its keys: the tool gets only the basics
            // and its envVars.
            cmd.env_clear()
                .envs(
                    INHERITED_ENV
                        .iter()
                        .filter_map(|k| std::env::var(k).ok().map(|v| (*k, v))),
                )
                .envs(env)
                .args(args);
            // A process group of its own, so that ending the session kills what the command
            // started too: `npx`, `uvx` or a shell run the server as their child, which the
            // plain kill of the command left running with its stdout open, and a wrapper that
            // exits when its stdin closes left running too (see `process_group`).
            let mut cmd = CommandWrap::from(cmd);
            cmd.wrap(ProcessGroup::leader()).wrap(EndGroupWithLeader);
            // Its stderr is not kept: tools print their configuration there, secrets included.
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| Failure::new(format!("cannot start `{command}`: {e}")))?;
            ().serve(transport)
                .await
                .map_err(|e| Failure::from_error("cannot initialize the MCP session", &e))?
        }
    };
    Ok(Opened { client, renew_at })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tidies_transport_type_names() {
        assert_eq!(
            tidy("Send message error Transport [a::B<c::D>] error: Auth required, when send initialize request"),
            "Send message error Auth required, when send initialize request"
        );
        assert_eq!(tidy("plain"), "plain");
    }

    #[test]
    fn urls_in_errors_lose_their_query() {
        assert_eq!(
            tidy("error sending request for url (https://mcp.example.com/sse?api_key=sk_live_1&x=2): refused"),
            "error sending request for url (https://mcp.example.com/sse): refused"
        );
        assert_eq!(
            tidy("posting to http://h:9/messages?sessionId=abc failed, then http://other/x"),
            "posting to http://h:9/messages failed, then http://other/x"
        );
    }

    #[test]
    fn a_refusal_anywhere_in_the_chain_is_unauthorized() {
        let f = Failure::from_error("test", &sse::SseError::Unauthorized(401));
        assert!(
            f.unauthorized
                && f.message
                    .ends_with("(authentication failed: check authType and authConfig)")
        );
        let f = Failure::from_error("test", &sse::SseError::Failed("HTTP 500".into()));
        assert!(!f.unauthorized);
    }

    #[test]
    fn a_servers_error_answer_is_never_a_refusal_of_the_credentials() {
        let answer = rmcp::model::ErrorData::internal_error("GitHub API returned HTTP 403", None);
        let f = Failure::from_service("calling a tool", &ServiceError::McpError(answer));
        assert!(f.protocol && !f.unauthorized, "{}", f.message);
        assert!(f.message.contains("GitHub API returned HTTP 403"), "{}", f.message);
    }
}
