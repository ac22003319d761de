//! Who is calling: a user of the admin API with a role, or an app of the external API.

use crate::auth::verified_apps::VerifiedApp;
use crate::AppError;

/// 1 = administrator, 2 = regular user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    User,
}

impl Role {
    pub fn from_code(code: i16) -> Self {
        if code == 1 {
            Self::Admin
        } else {
            Self::User
        }
    }
    pub fn code(self) -> i16 {
        match self {
            Self::Admin => 1,
            Self::User => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Admin => "administrator",
            Self::User => "user",
        }
    }
    /// Parses a client-supplied role code, naming the field on failure.
    pub fn parse(field: &str, code: i64) -> Result<Self, AppError> {
        match code {
            1 => Ok(Self::Admin),
            2 => Ok(Self::User),
            _ => Err(AppError::validation(format!(
                "{field} must be 1 (administrator) or 2 (regular user)"
            ))),
        }
    }
}

/// The authenticated user of the admin API, as the user's row is now.
#[derive(Debug, Clone)]
pub struct CurrentUser {
    pub id: i64,
    pub username: String,
    pub role: Role,
}

impl CurrentUser {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// 403 unless the caller is an administrator.
    pub fn require_admin(&self) -> Result<(), AppError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(AppError::Forbidden("administrator role required".into()))
        }
    }

    /// Administrators may act on anything; others only on what they created.
    pub fn can_manage(&self, creator_id: i64) -> bool {
        self.is_admin() || self.id == creator_id
    }
}

/// An enabled app whose credentials the request carried.
#[derive(Debug, Clone)]
pub struct AppCaller {
    pub id: i64,
    pub app_id: String,
    /// Who created the app: its external users' model usage and uploads are recorded to them.
    pub creator_id: i64,
}

impl From<VerifiedApp> for AppCaller {
    fn from(app: VerifiedApp) -> Self {
        Self {
            id: app.id,
            app_id: app.app_id,
            creator_id: app.creator_id,
        }
    }
}
