//! Opaque refresh tokens: random secrets stored only as SHA-256 hashes, rotated on every
//! use; presenting an already-used token revokes its whole family.

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// A new random refresh token and the hash that is stored for it.
pub fn generate() -> (String, String) {
    let mut raw = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut raw);
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
    let hash = hash(&token);
    (token, hash)
}

pub fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}
