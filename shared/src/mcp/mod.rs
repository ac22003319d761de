//! MCP tool servers: their management (`/mcp-server`), a client over every transport (SSE,
//! Streamable HTTP, stdio) with the four authentication types, and the tools agent chat uses.

pub mod auth;
pub mod model;
pub mod oauth;
pub mod pool;
mod process_group;
pub mod repo;
pub mod service;
pub mod session;
pub mod sse;
pub mod stdio;
mod streamable;
pub mod tools;

pub use auth::AuthConfig;
pub use model::*;
pub use pool::McpPool;
pub use tools::{briefs, call_tool, tools_of_servers, usable_ids};

use crate::AppState;

fn limits(state: &AppState) -> pool::Limits {
    let c = state.config();
    pool::Limits {
        connect_timeout: c.mcp_connect_timeout,
        call_timeout: c.mcp_call_timeout,
        tools_ttl: c.mcp_tools_ttl,
        session_idle: c.mcp_session_idle,
        sessions_per_server: c.mcp_sessions_per_server,
    }
}
