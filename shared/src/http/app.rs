//! Assembling routers into a served application: the same code for the local server and for
//! every Lambda function.

use axum::middleware::from_fn_with_state;
use axum::Router;
use utoipa::openapi::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use super::middleware::{catch_panics, module_envelope, with_request_tracing};
use super::{answer_size, rate_limit};
use crate::{AppError, AppState};

/// Mounts `api` under the configured prefix, adds rate limits, a 500 for a panicking handler and
/// request tracing, and returns the router with the OpenAPI document of everything mounted.
pub fn assemble(api: OpenApiRouter<AppState>, state: AppState) -> (Router, OpenApi) {
    let prefix = state.base_path();
    let (router, mut openapi) = OpenApiRouter::new().nest(&prefix, api).split_for_parts();
    super::openapi::finish(&mut openapi);
    // An unknown path, or a known one with another method, answers in the envelope too, like
    // every other failure.
    let router = router
        .fallback(|| async { AppError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async {
            AppError::MethodNotAllowed("this path does not take that method".into())
        });
    let limited = router
        .layer(axum::middleware::from_fn(answer_size::refuse_oversized))
        .layer(from_fn_with_state(state.clone(), rate_limit::limit));
    // Inside the tracing layers, so the 500 is logged with the request's id.
    let guarded = catch_panics(limited);
    let enveloped = guarded.layer(from_fn_with_state(state.clone(), module_envelope));
    (with_request_tracing(enveloped.with_state(state)), openapi)
}
