//! AES-256-GCM for secrets stored in the database: `v1:` + base64(nonce || ciphertext).

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use rand::RngCore;

use crate::AppError;

const PREFIX: &str = "v1:";

#[derive(Clone)]
pub struct SecretBox {
    cipher: Aes256Gcm,
}

impl SecretBox {
    pub fn new(key: &[u8; 32]) -> Self {
        Self {
            cipher: Aes256Gcm::new(key.into()),
        }
    }

    pub fn seal(&self, plain: &str) -> Result<String, AppError> {
        let mut nonce = [0u8; 12];
        rand::thread_rng().fill_bytes(&mut nonce);
        let ciphertext = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), plain.as_bytes())
            .map_err(|_| AppError::Internal(anyhow::anyhow!("encrypting a secret failed")))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ciphertext);
        Ok(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(out)
        ))
    }

    pub fn open(&self, sealed: &str) -> Result<String, AppError> {
        let fail = || {
            AppError::Internal(anyhow::anyhow!(
                "a stored secret could not be decrypted (wrong ENCRYPTION_KEY?)"
            ))
        };
        let body = sealed.strip_prefix(PREFIX).ok_or_else(fail)?;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|_| fail())?;
        if raw.len() < 12 {
            return Err(fail());
        }
        let (nonce, ciphertext) = raw.split_at(12);
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), ciphertext)
            .map_err(|_| fail())?;
        String::from_utf8(plain).map_err(|_| fail())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_with_fresh_nonces_and_opens() {
        let sb = SecretBox::new(&[9u8; 32]);
        let a = sb.seal("sk-secret").unwrap();
        let b = sb.seal("sk-secret").unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with("v1:") && !a.contains("sk-secret"));
        assert_eq!(sb.open(&a).unwrap(), "sk-secret");
        assert!(SecretBox::new(&[1u8; 32]).open(&a).is_err());
    }
}
