//! Extractors whose rejections are envelope errors that name the offending field.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::AppError;

/// A JSON body. Unknown fields are ignored; a malformed body or a wrong type is a 400 that
/// says which field is wrong.
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.starts_with("application/json") || v.contains("+json"))
            .unwrap_or(false);
        if !is_json {
            return Err(AppError::validation(
                "request body must be JSON (Content-Type: application/json)",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                // The limit is the route's (2 MiB unless a router sets its own).
                AppError::PayloadTooLarge("request body exceeds the size limit of this endpoint".into())
            } else {
                AppError::validation(format!("request body could not be read: {e}"))
            }
        })?;
        parse_json(&bytes).map(Json)
    }
}

/// Deserialises JSON, turning serde's error into a message that starts with the field path.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AppError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.inner();
        let detail = inner.to_string();
        let detail = detail.split(" at line ").next().unwrap_or(&detail).to_owned();
        let message = if let Some(field) = missing_field(&detail) {
            let full = if path == "." {
                field.to_owned()
            } else {
                format!("{path}.{field}")
            };
            format!("{full} is required")
        } else if inner.is_syntax() || inner.is_eof() {
            format!("request body is not valid JSON: {detail}")
        } else if path == "." {
            format!("request body: {detail}")
        } else {
            format!("{path}: {detail}")
        };
        AppError::Validation(message)
    })
}

fn missing_field(detail: &str) -> Option<&str> {
    detail.strip_prefix("missing field `")?.strip_suffix('`')
}

/// Query parameters; a wrong type names the parameter.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, AppError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e: QueryRejection| {
                let text = e.body_text();
                let text = text
                    .strip_prefix("Failed to deserialize query string: ")
                    .unwrap_or(&text);
                AppError::Validation(format!("invalid query parameter: {text}"))
            })
    }
}

/// Path parameters; a wrong type (a word where an id goes) is a 400, not a 500.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, AppError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e: PathRejection| AppError::Validation(format!("invalid path parameter: {}", e.body_text())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Body {
        username: String,
        inner: Option<Inner>,
    }
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: i64,
    }

    fn msg(json: &str) -> String {
        parse_json::<Body>(json.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_fields() {
        assert_eq!(msg("{}"), "username is required");
        assert!(msg(r#"{"username": 3}"#).starts_with("username: invalid type"));
        assert!(msg(r#"{"username": "a", "inner": {"n": "x"}}"#).starts_with("inner.n: invalid type"));
        assert!(msg("{").starts_with("request body is not valid JSON"));
    }
}
