//! `/memory`: long-term memories of agents' users and the memory configs (recall strategies).

mod configs;
mod memories;

use shared::AppState;
use utoipa_axum::router::OpenApiRouter;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().merge(memories::router()).merge(configs::router())
}
