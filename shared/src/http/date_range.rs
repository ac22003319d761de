//! The `datetimeRange` query parameter as an extractor (see [`DatetimeRange`]).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::domain::DatetimeRange;
use crate::AppError;

impl<S: Send + Sync> FromRequestParts<S> for DatetimeRange {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, AppError> {
        DatetimeRange::from_query(parts.uri.query().unwrap_or_default())
    }
}
