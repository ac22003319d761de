//! Access tokens (JWT), refresh tokens, and the app credentials verified in the last seconds.

pub mod jwt;
pub mod refresh;
pub mod verified_apps;

pub use jwt::{AccessClaims, JwtKeys};
