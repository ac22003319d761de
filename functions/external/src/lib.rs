//! `/openapi/v1`: the external API, reached with app credentials (`Svc-App-Id` + `Svc-Token`),
//! and `/embed/{agentId}`, the chat page partners put in an iframe.

mod agents;
mod chat;
mod conversations;
mod embed;
mod nodes;
mod upload;
mod users;

use shared::AppState;
use utoipa_axum::router::OpenApiRouter;

/// The chat routes alone, for the response-streaming function.
pub fn stream_router() -> OpenApiRouter<AppState> {
    chat::router()
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(agents::router())
        .merge(users::router())
        .merge(conversations::router())
        .merge(upload::router())
        .merge(embed::router())
        .merge(nodes::router())
        .merge(chat::router())
}
