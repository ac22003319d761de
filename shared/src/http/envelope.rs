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
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Empty;

/// Documented as what it is on the wire, `null` (a unit struct would be a schema-less value).
impl utoipa::PartialSchema for Empty {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::Null)
            .into()
    }
}

impl ToSchema for Empty {}

impl Api<Empty> {
    /// Success with `data: null`.
    pub fn empty() -> ApiResult<Empty> {
        Ok(Api(Empty))
    }
}

/// The `{status, message, data}` envelope of the model and skill modules.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusEnvelope<T> {
    pub status: i64,
    pub message: String,
    pub data: Option<T>,
}

/// A paged list of the model and skill modules: `page`, `size`, `total` beside `data`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusPageEnvelope<T> {
    pub status: i64,
    pub message: String,
    pub data: Vec<T>,
    pub page: i64,
    pub size: i64,
    pub total: i64,
}

/// A successful response in the `{status, message, data}` envelope.
pub struct StatusApi<T>(pub T);

pub type StatusResult<T> = Result<StatusApi<T>, AppError>;

impl<T: Serialize> IntoResponse for StatusApi<T> {
    fn into_response(self) -> Response {
        axum::Json(StatusEnvelope {
            status: 1,
            message: "success".to_owned(),
            data: Some(self.0),
        })
        .into_response()
    }
}

/// A paged success in the `{status, message, data, page, size, total}` shape.
pub struct StatusPage<T>(pub crate::http::Page<T>);

impl<T: Serialize> IntoResponse for StatusPage<T> {
    fn into_response(self) -> Response {
        let p = self.0;
        axum::Json(StatusPageEnvelope {
            status: 1,
            message: "success".to_owned(),
            data: p.data,
            page: p.page,
            size: p.size,
            total: p.total,
        })
        .into_response()
    }
}
