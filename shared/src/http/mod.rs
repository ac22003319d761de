//! HTTP plumbing shared by every function: envelopes, paging, extractors, middleware.

pub mod app_credentials;
pub mod auth;
pub mod client_ip;
pub mod date_range;
pub mod envelope;
pub mod event_stream;
pub mod extract;
pub mod files;
pub mod middleware;
pub mod multipart;
pub mod openapi;
pub mod paging;
pub mod rate_limit;

pub use auth::{AdminUser, CurrentUser};
pub use envelope::{Api, ApiResult, Envelope};
pub use extract::{Json, Path, Query};
pub use paging::{Page, PageQuery};
