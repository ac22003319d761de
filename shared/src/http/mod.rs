//! HTTP plumbing shared by every function: envelopes, extractors, middleware, the assembled
//! application and the HTTP Lambda entry points.

pub mod answer_size;
pub mod app;
pub mod app_credentials;
pub mod auth;
pub mod client_ip;
pub mod date_range;
pub mod envelope;
mod error_response;
pub mod event_stream;
pub mod external_caller;
pub mod extract;
pub mod files;
pub mod lambda;
pub mod middleware;
pub mod multipart;
pub mod openapi;
pub mod rate_limit;

pub use auth::AdminUser;
// The domain types handlers name beside the extractors they come from.
pub use crate::domain::{CurrentUser, Page, PageQuery};
pub use envelope::{Api, ApiResult, Envelope};
pub use extract::{refuse_blank, refuse_unknown, Json, NoBody, Path, Query};
