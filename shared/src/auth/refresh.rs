//! Opaque refresh tokens: random secrets stored only as SHA-256 hashes, rotated on every
//! use; presenting an already-used token revokes its whole family. A token names its family
//! (`<family>.<secret>`): one no longer stored (a login keeps only its newest used tokens) is
//! still known to be that login's, and its replay revokes the login too.

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// A new refresh token of the login `family` and the hash that is stored for it.
pub fn generate(family: Uuid) -> (String, String) {
    let mut raw = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut raw);
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
    let token = format!("{}.{secret}", family.simple());
    let hash = hash(&token);
    (token, hash)
}

/// The login a token names, if it is of the form `generate` makes.
pub fn family_of(token: &str) -> Option<Uuid> {
    let (family, secret) = token.split_once('.')?;
    (!secret.is_empty()).then_some(())?;
    Uuid::try_parse(family).ok()
}

pub fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_login() {
        let family = Uuid::new_v4();
        let (token, hash) = generate(family);
        assert_eq!(family_of(&token), Some(family));
        assert_eq!(hash, super::hash(&token));
        assert_ne!(generate(family).0, token);
        for other in ["garbage", "not-a-uuid.secret", &format!("{}.", family.simple()), ""] {
            assert_eq!(family_of(other), None, "{other}");
        }
    }
}
