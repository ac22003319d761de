//! Access tokens (JWT) and refresh tokens.

pub mod jwt;
pub mod refresh;

pub use jwt::{AccessClaims, JwtKeys};
