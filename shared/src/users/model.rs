//! Wire shapes of the users module.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Role;
use crate::time;

/// A user as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserRow {
    pub id: i64,
    pub username: String,
    pub password_hash: String,
    pub email: Option<String>,
    pub role: i16,
    pub tokens: i64,
    pub totals: i64,
    pub expire_dt: Option<DateTime<Utc>>,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
    /// Access tokens carry it; bumped to end them all (see `auth::jwt::AccessClaims::ver`).
    pub token_version: i64,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserView {
    pub id: i64,
    pub role: i16,
    pub role_name: String,
    pub username: String,
    pub email: Option<String>,
    /// Remaining token quota.
    pub tokens: i64,
    /// Total token quota granted.
    pub totals: i64,
    pub expire_dt: Option<String>,
    pub create_dt: String,
    pub update_dt: String,
}

impl From<UserRow> for UserView {
    fn from(u: UserRow) -> Self {
        Self {
            id: u.id,
            role: u.role,
            role_name: Role::from_code(u.role).name().to_owned(),
            username: u.username,
            email: u.email,
            tokens: u.tokens,
            totals: u.totals,
            expire_dt: u.expire_dt.map(time::datetime),
            create_dt: time::datetime(u.create_dt),
            update_dt: time::datetime(u.update_dt),
        }
    }
}

#[derive(Deserialize, ToSchema)]
pub struct LoginRequest {
    #[schema(required = true)]
    pub username: Option<String>,
    #[schema(required = true)]
    pub password: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoginResult {
    pub token: String,
    pub refresh_token: String,
    pub email: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefreshRequest {
    #[schema(required = true)]
    pub refresh_token: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenPair {
    pub token: String,
    pub refresh_token: String,
}

#[derive(Deserialize, ToSchema)]
pub struct CreateUserRequest {
    #[schema(required = true)]
    pub username: Option<String>,
    #[schema(required = true)]
    pub password: Option<String>,
    /// 1 = administrator, 2 = regular user.
    #[schema(required = true)]
    pub role: Option<i64>,
    pub email: Option<String>,
    /// Initial token quota.
    pub totals: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct UpdateUserRequest {
    #[schema(required = true)]
    pub role: Option<i64>,
    /// Absent keeps the email; `null` or `""` removes it.
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<String>)]
    pub email: Option<Option<String>>,
    pub password: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct PasswordRequest {
    #[schema(required = true)]
    pub password: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangePasswordRequest {
    #[schema(required = true)]
    pub old_password: Option<String>,
    #[schema(required = true)]
    pub new_password: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct AuthorizeCodeRequest {
    #[schema(required = true)]
    pub email: Option<String>,
    /// Validity in days from now.
    #[schema(required = true)]
    pub days: Option<i64>,
    /// Tokens granted.
    #[schema(required = true)]
    pub totals: Option<i64>,
}
