//! `/agent`: agents, the market, conversations, analytics, the creation stream and chat.

mod agents;
mod analytics;
mod chat;
mod conversations;

use shared::AppState;
use utoipa_axum::router::OpenApiRouter;

/// The two streamed routes (chat, creation) alone, for the response-streaming function.
pub fn stream_router() -> OpenApiRouter<AppState> {
    chat::router()
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(agents::router())
        .merge(conversations::router())
        .merge(analytics::router())
        .merge(chat::router())
}
