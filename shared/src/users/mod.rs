//! Users, login, token refresh and quotas.

pub mod model;
pub mod repo;
pub mod service;
pub(crate) mod throttle;

pub use model::*;

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
    pub fn parse(field: &str, code: i64) -> Result<Self, crate::AppError> {
        match code {
            1 => Ok(Self::Admin),
            2 => Ok(Self::User),
            _ => Err(crate::AppError::validation(format!(
                "{field} must be 1 (administrator) or 2 (regular user)"
            ))),
        }
    }
}
