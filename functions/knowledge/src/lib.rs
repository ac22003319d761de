//! `/rag`, `/document`, `/chunk` and `/store-instance`: knowledge bases, their documents and
//! chunks, and the stores behind them.

mod bases;
mod chunks;
mod documents;
mod search;
mod stores;

use shared::AppState;
use utoipa_axum::router::OpenApiRouter;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(bases::router())
        .merge(documents::router())
        .merge(chunks::router())
        .merge(stores::router())
        .merge(search::router())
}
