//! `Svc-Auth` authentication: the current user and the administrator guard.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::auth::AccessClaims;
use crate::domain::{CurrentUser, Role};
use crate::users::repo as user_repo;
use crate::{AppError, AppState};

pub const AUTH_HEADER: &str = "svc-auth";

/// The user of a verified token, from the user's row as it is now: refused when the row is gone
/// or its token version moved past the token's. The row is re-read on every request so that a
/// deleted user, a changed role or a bumped token version (password changed, login revoked)
/// takes effect at once, not when the token expires.
pub fn authenticate(claims: &AccessClaims, identity: Option<user_repo::Identity>) -> Result<CurrentUser, AppError> {
    let (id, username, role, version) = identity
        .ok_or_else(|| AppError::unauthorized("the user of this token no longer exists; please log in again"))?;
    if version != claims.ver {
        return Err(AppError::unauthorized(
            "this token was revoked (password changed or login revoked); please log in again",
        ));
    }
    Ok(CurrentUser {
        id,
        username,
        role: Role::from_code(role),
    })
}

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
