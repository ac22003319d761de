//! Secrets at rest, password hashing, masking and constant-time comparison.

pub mod mask;
pub mod password;
pub mod secret_box;

pub use mask::{is_masked, mask_secret};
pub use secret_box::SecretBox;

/// `sha256:<hex>` of some bytes: the content hash of uploads and documents.
pub fn content_hash(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Compares two secrets without leaking where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}
