//! Extractors whose rejections are envelope errors that name the offending field.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::json::parse_json;
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
            // Media types compare without regard to case (RFC 9110, 8.3.1).
            .map(|v| v.to_ascii_lowercase())
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

/// Query parameters; a wrong type or a NUL character names the parameter.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, AppError> {
        let query = parts.uri.query().unwrap_or_default();
        if query.contains("%00") {
            if let Some((name, _)) =
                form_urlencoded::parse(query.as_bytes()).find(|(k, v)| k.contains('\0') || v.contains('\0'))
            {
                return Err(AppError::Validation(format!(
                    "invalid query parameter: {}: must not contain NUL characters",
                    name.replace('\0', "%00")
                )));
            }
        }
        let parsed = match without_blank_values(query) {
            Some(kept) => {
                let uri: axum::http::Uri = format!("/?{kept}")
                    .parse()
                    .map_err(|_| AppError::validation("invalid query string"))?;
                axum::extract::Query::<T>::try_from_uri(&uri)
            }
            None => axum::extract::Query::<T>::from_request_parts(parts, state).await,
        };
        parsed.map(|q| Query(q.0)).map_err(|e: QueryRejection| {
            let text = e.body_text();
            let text = text
                .strip_prefix("Failed to deserialize query string: ")
                .unwrap_or(&text);
            AppError::Validation(format!("invalid query parameter: {text}"))
        })
    }
}

/// Refuses `name` sent blank (`name=`, or only spaces), which `Query` reads as absent: for a
/// parameter that narrows a deletion, absent means all, and a client that filled it from an
/// unset variable meant one.
pub fn refuse_blank(uri: &axum::http::Uri, name: &str, instead: &str) -> Result<(), AppError> {
    let query = uri.query().unwrap_or_default();
    match form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == name && v.trim().is_empty()) {
        true => Err(AppError::Validation(format!("{name} must not be blank; {instead}"))),
        false => Ok(()),
    }
}

/// Refuses a query parameter other than `known`: where an absent parameter widens what a
/// request does (a deletion of all), one misspelt (`conversation_id`) would be read as absent.
pub fn refuse_unknown(uri: &axum::http::Uri, known: &[&str]) -> Result<(), AppError> {
    let query = uri.query().unwrap_or_default();
    match form_urlencoded::parse(query.as_bytes()).find(|(k, _)| !known.contains(&k.as_ref())) {
        Some((k, _)) => Err(AppError::Validation(format!(
            "unknown query parameter {k:?}; this request takes {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// A request that must come without a body, or with one that says nothing (`{}`, `null`, as
/// some clients send on DELETE): for a route whose parameters are in its query, a client
/// sending them in a body meant them, and they would be read as absent.
pub struct NoBody;

/// More than this is not read to see that a body is only whitespace.
const NO_BODY_READ: usize = 1024;

impl<S: Send + Sync> FromRequest<S> for NoBody {
    type Rejection = AppError;

    async fn from_request(req: Request, _: &S) -> Result<Self, Self::Rejection> {
        let refused = || AppError::Validation("this request takes no body; send its parameters in the query".into());
        let body = axum::body::to_bytes(req.into_body(), NO_BODY_READ)
            .await
            .map_err(|_| refused())?;
        match body.trim_ascii() {
            b"" | b"{}" | b"null" => Ok(NoBody),
            _ => Err(refused()),
        }
    }
}

/// The query without its blank parameters, or `None` when it has none. Forms send an unset
/// filter as `status=`; read as absent, it filters nothing, where parsing it would refuse a
/// number filter and match only empty text.
fn without_blank_values(query: &str) -> Option<String> {
    let pairs = form_urlencoded::parse(query.as_bytes());
    if !pairs.clone().any(|(_, v)| v.trim().is_empty()) {
        return None;
    }
    let kept = pairs.filter(|(_, v)| !v.trim().is_empty());
    Some(
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(kept)
            .finish(),
    )
}

/// Path parameters; a wrong type (a word where an id goes) or a NUL character is a 400, not a 500.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, AppError> {
        if parts.uri.path().contains("%00") {
            return Err(AppError::validation(
                "invalid path parameter: must not contain NUL characters",
            ));
        }
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e: PathRejection| AppError::Validation(format!("invalid path parameter: {}", e.body_text())))
    }
}

#[cfg(test)]
mod tests {
    use super::without_blank_values;

    #[test]
    fn blank_parameters_are_dropped_and_the_rest_kept_encoded() {
        assert_eq!(without_blank_values("page=2&size=10"), None);
        assert_eq!(without_blank_values(""), None);
        assert_eq!(
            without_blank_values("status=&keyword=a%26b&bizId=%20&page=2").as_deref(),
            Some("keyword=a%26b&page=2")
        );
        assert_eq!(without_blank_values("x=").as_deref(), Some(""));
    }
}
