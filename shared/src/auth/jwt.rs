//! HS256 access tokens.

use std::time::Duration;

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::AppError;

/// Claims of an admin-API access token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccessClaims {
    /// User id.
    pub sub: i64,
    pub role: i16,
    pub iat: i64,
    pub exp: i64,
    /// Token kind; only `access` is accepted by the admin API.
    pub typ: String,
    /// The user's token version when issued; a token whose version is no longer the user's
    /// (password changed, a login revoked) is refused. Absent in tokens from before versions.
    #[serde(default)]
    pub ver: i64,
}

#[derive(Clone)]
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    access_ttl: Duration,
}

impl JwtKeys {
    pub fn new(secret: &[u8], access_ttl: Duration) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            access_ttl,
        }
    }

    pub fn issue_access(&self, user_id: i64, role: i16, version: i64) -> Result<String, AppError> {
        let now = chrono::Utc::now().timestamp();
        let claims = AccessClaims {
            sub: user_id,
            role,
            iat: now,
            exp: now + self.access_ttl.as_secs() as i64,
            typ: "access".to_owned(),
            ver: version,
        };
        encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AppError::Internal(anyhow::Error::new(e).context("signing access token")))
    }

    pub fn verify_access(&self, token: &str) -> Result<AccessClaims, AppError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        let data = decode::<AccessClaims>(token, &self.decoding, &validation).map_err(|e| {
            let why = match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => "token expired",
                _ => "token invalid",
            };
            AppError::unauthorized(format!("{why}; please log in again"))
        })?;
        if data.claims.typ != "access" {
            return Err(AppError::unauthorized("token invalid; please log in again"));
        }
        Ok(data.claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_forgery() {
        let keys = JwtKeys::new(&[1u8; 32], Duration::from_secs(60));
        let token = keys.issue_access(7, 2, 0).unwrap();
        let claims = keys.verify_access(&token).unwrap();
        assert_eq!((claims.sub, claims.role), (7, 2));
        let other = JwtKeys::new(&[2u8; 32], Duration::from_secs(60));
        assert!(other.verify_access(&token).is_err());
        let expired = JwtKeys::new(&[1u8; 32], Duration::from_secs(0));
        let old = {
            let now = chrono::Utc::now().timestamp();
            let claims = AccessClaims {
                sub: 1,
                role: 1,
                iat: now - 100,
                exp: now - 50,
                typ: "access".into(),
                ver: 0,
            };
            encode(&Header::new(Algorithm::HS256), &claims, &expired.encoding).unwrap()
        };
        assert!(keys.verify_access(&old).unwrap_err().to_string().contains("expired"));
    }
}
