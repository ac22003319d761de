//! Secrets at rest, password hashing, masking and constant-time comparison.

pub mod mask;
pub mod password;
pub mod secret_box;

pub use mask::{is_masked, mask_secret};
pub use secret_box::SecretBox;

/// Compares two secrets without leaking where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}
