//! The external API (`/openapi/v1`): what a partner app reaches with its credentials on behalf
//! of its own end users (external users, known by openId within the app).

pub mod agents;
pub mod caller;
pub mod chat;
pub mod conversations;
pub mod model;
pub mod repo;
pub mod upload;
pub mod users;

pub use caller::ExternalCaller;
pub use model::*;
