//! External API authentication: `Svc-App-Id` + `Svc-Token`, compared in constant time; a pair
//! verified in the last few seconds is not read again (`crate::auth::verified_apps`).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::auth::verified_apps::VerifiedApp;
use crate::crypto::constant_time_eq;
use crate::domain::AppCaller;
use crate::{AppError, AppState};

impl FromRequestParts<AppState> for AppCaller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        // The rate limiter may have authenticated the request already.
        if let Some(caller) = parts.extensions.get::<AppCaller>() {
            tracing::Span::current().record("app.id", caller.app_id.as_str());
            return Ok(caller.clone());
        }
        let caller = authenticate(parts, state).await?;
        tracing::Span::current().record("app.id", caller.app_id.as_str());
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

/// The app whose id and token the headers carry, if it exists, the token matches and it is enabled.
async fn authenticate(parts: &Parts, state: &AppState) -> Result<AppCaller, AppError> {
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let (Some(app_id), Some(token)) = (header("svc-app-id"), header("svc-token")) else {
        return Err(AppError::unauthorized(
            "app credentials required: send Svc-App-Id and Svc-Token",
        ));
    };
    if let Some(app) = state.verified_apps().get(app_id, token) {
        return Ok(app.into());
    }
    let refused = || AppError::unauthorized(crate::error::APP_REFUSED);
    let row: Option<(i64, String, i16, i64)> =
        sqlx::query_as("SELECT id, token_enc, status, creator_id FROM apps WHERE app_id = $1")
            .bind(app_id)
            .fetch_optional(state.db())
            .await?;
    let Some((id, sealed, status, creator_id)) = row else {
        // Spend the same work as a real comparison so unknown ids are not distinguishable.
        let _ = constant_time_eq(token.as_bytes(), token.as_bytes());
        return Err(refused());
    };
    let expected = state.secrets().open(&sealed)?;
    if !constant_time_eq(expected.as_bytes(), token.as_bytes()) || status != 1 {
        return Err(refused());
    }
    let app = VerifiedApp {
        id,
        app_id: app_id.to_owned(),
        creator_id,
    };
    state.verified_apps().put(&app, token);
    Ok(app.into())
}
