//! The HTTP client of the Streamable HTTP transport: rmcp's own reqwest client (reqwest 0.13),
//! confined to the networks of the server's reach, which also reads a refused session as the
//! expired session it is.
//!
//! The MCP specification has a server answer an unknown session id with 404, which rmcp takes
//! as an expired session: it opens a new one and sends the request again. Servers that
//! restarted often answer something else: server-everything sends HTTP 400 with a JSON-RPC
//! error without an id, which no request waits for, so the call sat until its timeout (60 s)
//! although the answer had come. Here a 404 or 400 to a request sent in a session, or a
//! JSON-RPC error that names no request and speaks of the session, counts as an expired session: the request is retried
//! once in a new session and fails at once if that fails too. Other failures are the call's:
//! a server error (5xx, or a proxy's 502 or 504) may come after the tool did its work, and
//! sending the call again would run it twice (an issue filed, a mail sent).

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::Sse;

type Error = StreamableHttpError<reqwest13::Error>;

#[derive(Clone, Default)]
pub struct StreamableClient(reqwest13::Client);

impl StreamableClient {
    pub fn new(client: reqwest13::Client) -> Self {
        Self(client)
    }
}

/// Whether a request in a session failed as a session the server no longer holds would:
/// HTTP 404 or 400, or a JSON-RPC error about the session that names no request (nothing
/// would ever answer the request that was sent).
fn session_refused(result: &Result<StreamableHttpPostResponse, Error>) -> bool {
    match result {
        // rmcp hands over a JSON-RPC error whatever the HTTP status was: an id-less one is a
        // refusal of the session only when it says so, not a catch-all's "Internal server
        // error" after the tool ran.
        Ok(StreamableHttpPostResponse::Json(JsonRpcMessage::Error(e), _)) => {
            e.id.is_none() && e.error.message.to_lowercase().contains("session")
        }
        Ok(_) => false,
        Err(StreamableHttpError::HttpStatus(s)) => refusal(s.status),
        // rmcp's words for any other HTTP error: "HTTP <status> <reason>: <body>".
        Err(StreamableHttpError::UnexpectedServerResponse(text)) => text
            .strip_prefix("HTTP ")
            .and_then(|t| t.get(..3))
            .and_then(|code| code.parse().ok())
            .is_some_and(refusal),
        Err(_) => false,
    }
}

/// An HTTP status that refuses a request for its session before any work: 404 as the MCP
/// specification says, 400 as servers built on the TypeScript SDK answer an unknown session.
/// Not the credentials (401, 403: those go to the OAuth2 renewal), the server's load (429)
/// nor its failures (5xx).
fn refusal(status: u16) -> bool {
    matches!(status, 400 | 404)
}

impl StreamableHttpClient for StreamableClient {
    type Error = reqwest13::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let in_session = session_id.is_some();
        let result = self
            .0
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        expire_refused(in_session, result.map_err(strip_url))
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let in_session = session_id.is_some();
        let result = self
            .0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        expire_refused(in_session, result.map_err(strip_url))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
            .map_err(strip_url)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
            .map_err(strip_url)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .map_err(strip_url)
    }
}

/// A failure without the URL the HTTP client names in it: rmcp logs some failures itself (a
/// session's end refused, a stream lost), where the query of a server's URL, which may hold
/// its key, would be written out whole.
fn strip_url(error: Error) -> Error {
    match error {
        StreamableHttpError::Client(e) => StreamableHttpError::Client(e.without_url()),
        other => other,
    }
}

fn expire_refused(
    in_session: bool,
    result: Result<StreamableHttpPostResponse, Error>,
) -> Result<StreamableHttpPostResponse, Error> {
    if in_session && session_refused(&result) {
        tracing::info!("MCP server refused its session; opening a new one");
        return Err(StreamableHttpError::SessionExpired);
    }
    result
}

#[cfg(test)]
mod tests {
    use rmcp::transport::streamable_http_client::HttpStatusError;

    use super::*;

    #[test]
    fn refusals_of_a_session_read_as_expired_but_not_credentials_load_or_failures() {
        let orphan: rmcp::model::ServerJsonRpcMessage = serde_json::from_str(
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#,
        )
        .unwrap();
        assert!(session_refused(&Ok(StreamableHttpPostResponse::Json(orphan, None))));
        let answered: rmcp::model::ServerJsonRpcMessage =
            serde_json::from_str(r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"bad"},"id":3}"#).unwrap();
        assert!(!session_refused(&Ok(StreamableHttpPostResponse::Json(answered, None))));
        // The TypeScript SDK's catch-all, answered with HTTP 500 after the tool may have run.
        let failed: rmcp::model::ServerJsonRpcMessage = serde_json::from_str(
            r#"{"jsonrpc":"2.0","error":{"code":-32603,"message":"Internal server error"},"id":null}"#,
        )
        .unwrap();
        assert!(!session_refused(&Ok(StreamableHttpPostResponse::Json(failed, None))));
        assert!(session_refused(&Err(StreamableHttpError::HttpStatus(
            HttpStatusError::new(404, None)
        ))));
        // A server's failure may come after the tool ran: sent again, it would run twice.
        for status in [500, 502, 503, 504] {
            assert!(!session_refused(&Err(StreamableHttpError::HttpStatus(
                HttpStatusError::new(status, None)
            ))));
        }
        assert!(!session_refused(&Err(StreamableHttpError::UnexpectedServerResponse(
            "HTTP 502 Bad Gateway: upstream".into()
        ))));
        assert!(!session_refused(&Err(StreamableHttpError::HttpStatus(
            HttpStatusError::new(429, None)
        ))));
        assert!(session_refused(&Err(StreamableHttpError::UnexpectedServerResponse(
            "HTTP 400 Bad Request: no session".into()
        ))));
        assert!(!session_refused(&Err(StreamableHttpError::UnexpectedServerResponse(
            "HTTP 401 Unauthorized: no token".into()
        ))));
        assert!(!session_refused(&Err(StreamableHttpError::UnexpectedServerResponse(
            "could not parse".into()
        ))));
        // Outside a session (initialize) nothing is renamed.
        let err = expire_refused(
            false,
            Err(StreamableHttpError::HttpStatus(HttpStatusError::new(500, None))),
        );
        assert!(matches!(err, Err(StreamableHttpError::HttpStatus(_))));
    }
}
