//! Common library of the agent platform.
//!
//! Everything a function crate needs lives here: configuration, authentication, crypto, object
//! storage, queues, the domain services and, with the `http` feature, the HTTP plumbing
//! (envelopes, extractors, middleware). Function crates only hold thin handlers and their
//! Lambda entry points. `docs/layers.md` says which module may import which.

pub mod admission;
pub mod agents;
pub mod apps;
pub mod auth;
pub mod config;
pub mod creation_cap;
pub mod crypto;
pub mod db;
pub mod domain;
pub mod error;
pub mod external;
pub mod health;
pub mod housekeeping;
#[cfg(feature = "http")]
pub mod http;
pub mod json;
pub mod lambda;
pub mod mcp;
pub mod memory;
pub mod models;
pub mod outbound;
pub mod queue;
pub mod rag;
pub mod resources;
pub mod skills;
pub mod startup;
pub mod state;
pub mod storage;
pub mod stores;
pub mod telemetry;
pub mod text;
pub mod time;
pub mod upstream;
pub mod users;
pub mod validate;

pub use error::{AppError, AppResult};
pub use state::AppState;

/// Every binary of the service (each Lambda function, the local server, the workers) allocates
/// through mimalloc: a streamed chat makes many small, short-lived allocations (a chunk, an
/// event, a line per token), and glibc's malloc and free took about 8% of the server's CPU.
/// Built without transparent huge pages (`no_thp`): mimalloc marks its arenas for them, and
/// memory it gave back and used again came back 2 MiB at a time, each zeroed on the thread that
/// touched it (per chat benchmark run: 26 times in the server, about 500 in the benchmark's own
/// process, which shares its cores).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
