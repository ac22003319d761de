//! The external chat's caller as an extractor (see [`ExternalCaller`]).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::auth::token_from;
use crate::apps::embed_token;
use crate::domain::AppCaller;
use crate::external::caller::ExternalCaller;
use crate::{AppError, AppState};

impl FromRequestParts<AppState> for ExternalCaller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        // The rate limiter may have authenticated the request already.
        if let Some(caller) = parts.extensions.get::<ExternalCaller>() {
            return Ok(caller.clone());
        }
        let caller = authenticate(parts, state).await?;
        tracing::Span::current().record("app.id", caller.app.app_id.as_str());
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

/// An embed token in `Svc-Auth` when no app headers came, else the app's credentials.
async fn authenticate(parts: &mut Parts, state: &AppState) -> Result<ExternalCaller, AppError> {
    let has_app_headers = parts.headers.contains_key("svc-app-id") || parts.headers.contains_key("svc-token");
    if !has_app_headers {
        if let Some(token) = token_from(parts) {
            let scope = embed_token::verify(state, token).await?;
            return Ok(ExternalCaller {
                app: AppCaller {
                    id: scope.app_row_id,
                    app_id: scope.app_id,
                    creator_id: scope.app_creator_id,
                },
                scope: Some(scope.open_id),
                agent_scope: scope.agent_id,
            });
        }
    }
    let app = AppCaller::from_request_parts(parts, state).await?;
    Ok(ExternalCaller {
        app,
        scope: None,
        agent_scope: None,
    })
}
