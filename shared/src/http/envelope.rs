//! The `{code, msg, data}` envelope of the admin and external API.

use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppError;

/// The admin and external API envelope. `code` 1 is success; failures carry `data: null`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Envelope<T> {
    pub code: i64,
    pub msg: String,
    pub data: Option<T>,
}

/// A successful response in the admin envelope.
pub struct Api<T>(pub T);

pub type ApiResult<T> = Result<Api<T>, AppError>;

impl<T: Serialize> IntoResponse for Api<T> {
    fn into_response(self) -> Response {
        axum::Json(Envelope {
            code: 1,
            msg: "success".to_owned(),
            data: Some(self.0),
        })
        .into_response()
    }
}

/// The `data: null` of a success without data.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Empty;

impl Api<Empty> {
    /// Success with `data: null`.
    pub fn empty() -> ApiResult<Empty> {
        Ok(Api(Empty))
    }
}
