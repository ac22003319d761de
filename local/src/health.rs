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
    let db = sqlx::query("SELECT 1")
        .execute(state.db())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    let storage = state.storage().check().await.map_err(|e| e.to_string());
    let queue = state.queue().check().await.map_err(|e| format!("{e:#}"));
    // Anyone may ask, and the reasons name hosts and users: they go to the log only.
    let show = |part: &str, r: &Result<(), String>| match r {
        Ok(()) => json!("ok"),
        Err(e) => {
            tracing::warn!(part, error = %e, "health check failed");
            json!({ "error": "unavailable; the reason is in the service log" })
        }
    };
    let healthy = db.is_ok() && storage.is_ok() && queue.is_ok();
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": if healthy { "ok" } else { "degraded" },
        "db": show("db", &db),
        "storage": show("storage", &storage),
        "queue": show("queue", &queue),
    });
    (status, Json(body))
}
