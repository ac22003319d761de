//! `/rag`, `/document`, `/chunk` and `/store-instance`: knowledge bases, their documents and
//! chunks, and the stores behind them.

mod bases;
mod chunks;
mod documents;
mod search;
mod stores;

use shared::AppState;
use utoipa_axum::router::OpenApiRouter;

/// The two streamed Q&A routes alone, for the response-streaming function.
pub fn qa_router() -> OpenApiRouter<AppState> {
    search::qa_router()
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(bases::router())
        .merge(documents::router())
        .merge(chunks::router())
        .merge(stores::router())
        .merge(search::router())
}
