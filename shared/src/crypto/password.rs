//! argon2id password hashing.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use crate::AppError;

pub fn hash(password: &str) -> Result<String, AppError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AppError::Internal(anyhow::anyhow!("hashing a password failed: {e}")))
}

/// Verifies `password`; an unparsable stored hash never verifies.
pub fn verify(password: &str, stored: &str) -> bool {
    match PasswordHash::new(stored) {
        Ok(parsed) => Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok(),
        // An account with no usable password yet (one `authorize/code` created) takes as long
        // to refuse as any other: a quick answer would tell which emails have accounts.
        Err(_) => {
            burn_time(password);
            false
        }
    }
}

/// `hash` off the async workers: argon2 takes ~20 ms of CPU, which would stall every other
/// request sharing the worker thread.
pub async fn hash_off_thread(password: String) -> Result<String, AppError> {
    tokio::task::spawn_blocking(move || hash(&password))
        .await
        .map_err(|e| AppError::Internal(anyhow::anyhow!("password hashing task failed: {e}")))?
}

/// `verify` off the async workers (see `hash_off_thread`).
pub async fn verify_off_thread(password: String, stored: String) -> bool {
    tokio::task::spawn_blocking(move || verify(&password, &stored))
        .await
        .unwrap_or(false)
}

/// Runs a verification anyway, so a login for an unknown user costs as much time as one for
/// a known user.
pub fn burn_time(password: &str) {
    let _ = verify(password, DUMMY);
}

/// What `burn_time` verifies against: a hash `hash` made, with its parameters (a test holds
/// them equal). Made by the first unknown user's login, it took that login twice as long as a
/// known user's on every new instance; made at start, every function's cold start paid for it.
const DUMMY: &str = "$argon2id$v=19$m=19456,t=2,p=1$MXxLO+RAKtbVdSIJwjRdnQ$8nS9OsTNRYiEYK7n2Uel+YqAz91Y0i5y5kWUol4Bkcg";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dummy_hash_costs_what_a_real_one_does() {
        let params = |h: &str| {
            let p = PasswordHash::new(h).expect("a PHC string");
            (p.algorithm.to_string(), p.version, p.params.to_string())
        };
        assert_eq!(params(DUMMY), params(&hash("x").unwrap()));
        assert!(verify("not-a-real-password", DUMMY));
    }

    #[test]
    fn hashes_verify() {
        let h = hash("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify("correct horse", &h));
        assert!(!verify("wrong", &h));
        assert!(!verify("x", "garbage"));
    }
}
