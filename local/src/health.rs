//! `GET /health`: database, storage and queue, each checked for real.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use shared::AppState;

pub fn router(state: AppState) -> Router {
    Router::new().route("/health", get(health)).with_state(state)
}

async fn health(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let health = shared::health::check(&state).await;
    // Anyone may ask, and the reasons name hosts and users: they go to the log only.
    let show = |part: &str, r: &Result<(), String>| match r {
        Ok(()) => json!("ok"),
        Err(e) => {
            tracing::warn!(part, error = %e, "health check failed");
            json!({ "error": "unavailable; the reason is in the service log" })
        }
    };
    let (status, word) = match health.is_ok() {
        true => (StatusCode::OK, "ok"),
        false => (StatusCode::SERVICE_UNAVAILABLE, "degraded"),
    };
    let body = json!({
        "status": word,
        "db": show("db", &health.db),
        "storage": show("storage", &health.storage),
        "queue": show("queue", &health.queue),
    });
    (status, Json(body))
}
