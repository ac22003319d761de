//! Common library of the agent platform.
//!
//! Everything a function crate needs lives here: configuration, HTTP plumbing (envelopes,
//! errors, extractors), authentication, crypto, object storage, queues and the domain
//! services. Function crates only hold thin handlers and their Lambda entry points.

pub mod agents;
pub mod app;
pub mod apps;
pub mod auth;
pub mod config;
pub mod crypto;
pub mod db;
pub mod error;
pub mod external;
pub mod housekeeping;
pub mod http;
pub mod lambda;
pub mod mcp;
pub mod memory;
pub mod models;
pub mod outbound;
pub mod queue;
pub mod rag;
pub mod resources;
pub mod skills;
pub mod state;
pub mod storage;
pub mod stores;
pub mod telemetry;
pub mod time;
pub mod upstream;
pub mod users;
pub mod validate;

pub use error::{AppError, AppResult};
pub use state::AppState;
