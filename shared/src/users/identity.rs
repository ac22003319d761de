//! Who a verified access token speaks for, as the user's row says now.

use crate::auth::AccessClaims;
use crate::domain::{CurrentUser, Role};
use crate::users::repo::Identity;
use crate::AppError;

/// The user of a verified token, from the user's row as it is now: refused when the row is gone
/// or its token version moved past the token's. The row is re-read on every request so that a
/// deleted user, a changed role or a bumped token version (password changed, login revoked)
/// takes effect at once, not when the token expires.
pub fn authenticate(claims: &AccessClaims, identity: Option<Identity>) -> Result<CurrentUser, AppError> {
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
