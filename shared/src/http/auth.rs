//! `Svc-Auth` authentication: the current user and the administrator guard.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::admission::{Pending, UserAdmission};
use crate::domain::CurrentUser;
use crate::users::identity::authenticate;
use crate::users::repo as user_repo;
use crate::{AppError, AppState};

pub const AUTH_HEADER: &str = "svc-auth";

/// Reads the bearer token from `Svc-Auth` (an optional `Bearer ` prefix is accepted).
pub fn token_from(parts: &Parts) -> Option<&str> {
    let raw = parts.headers.get(AUTH_HEADER)?.to_str().ok()?.trim();
    let token = raw.strip_prefix("Bearer ").unwrap_or(raw).trim();
    (!token.is_empty()).then_some(token)
}

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        if let Some(user) = parts.extensions.get::<CurrentUser>() {
            tracing::Span::current().record("user.id", user.id);
            return Ok(user.clone());
        }
        let token = token_from(parts)
            .ok_or_else(|| AppError::unauthorized("not logged in: send the Svc-Auth header; please log in again"))?;
        let claims = state.jwt().verify_access(token)?;
        let identity = user_repo::find_identity(state.db(), claims.sub).await?;
        let current = authenticate(&claims, identity)?;
        tracing::Span::current().record("user.id", current.id);
        parts.extensions.insert(current.clone());
        Ok(current)
    }
}

/// On a route whose handler carries the count (`crate::http::rate_limit`), the user's count and
/// identity are left to the handler's first read; anywhere else the user is authenticated here.
impl FromRequestParts<AppState> for UserAdmission {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        match parts.extensions.get::<Pending>().filter(|p| p.user_id().is_some()) {
            Some(pending) => Ok(UserAdmission::Pending(pending.clone())),
            None => CurrentUser::from_request_parts(parts, state)
                .await
                .map(UserAdmission::Known),
        }
    }
}

/// The caller, who must be an administrator (403 otherwise).
#[derive(Debug, Clone)]
pub struct AdminUser(pub CurrentUser);

impl FromRequestParts<AppState> for AdminUser {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let user = CurrentUser::from_request_parts(parts, state).await?;
        user.require_admin()?;
        Ok(AdminUser(user))
    }
}
