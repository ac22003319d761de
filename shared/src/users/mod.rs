//! Users, login, token refresh and quotas.

pub mod identity;
pub mod model;
pub mod repo;
pub mod service;
pub(crate) mod throttle;

pub use model::*;

pub use crate::domain::Role;
