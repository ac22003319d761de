//! OAuth 2.0 client credentials (authType 3): tokens fetched from `tokenUrl`, cached per
//! client until shortly before they expire.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::upstream::{read_body, BodyError};

/// Used when a token response has no `expires_in`.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);
/// The longest a token is kept, whatever lifetime its endpoint gives it.
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// A token is replaced this long before it expires (at most a tenth of its lifetime).
const MAX_MARGIN: Duration = Duration::from_secs(30);
/// The largest token answer read: a token is a few KB at most (a JWT with many claims), and
/// each one is kept in memory until it expires.
const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;
/// Tokens kept at most: one per client of the servers in use. Past it the ones due soonest go
/// (fetched again when needed), so a server's credentials changed again and again cannot grow
/// the cache for the life of the process.
const MAX_TOKENS: usize = 1000;

pub struct Credentials<'a> {
    pub client_id: &'a str,
    pub client_secret: &'a str,
    pub token_url: &'a str,
}

impl Credentials<'_> {
    fn key(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for part in [self.token_url, self.client_id, self.client_secret] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        h.finalize().into()
    }
}

/// A token and the moment after which it must not be used for a new session.
#[derive(Clone)]
pub struct Token {
    pub access_token: String,
    pub renew_at: Instant,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: Option<String>,
    #[serde(default, deserialize_with = "seconds")]
    expires_in: Option<u64>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `expires_in` as a number or a numeric string (Azure AD's v1 endpoint sends "3599"), whole or
/// not; anything else is no lifetime (the default applies) rather than no token.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    let seconds = match &value {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    // Saturating: a lifetime is capped anyway (`lifetime_of`).
    Ok(seconds.filter(|s| s.is_finite() && *s >= 0.0).map(|s| s as u64))
}

#[derive(Default)]
pub struct TokenCache {
    tokens: Mutex<HashMap<[u8; 32], Token>>,
}

impl TokenCache {
    /// The cached token while it is fresh, else a new one from the token endpoint.
    pub async fn token(&self, http: &reqwest::Client, creds: &Credentials<'_>) -> Result<Token, String> {
        let key = creds.key();
        if let Some(t) = self.lock().get(&key).filter(|t| Instant::now() < t.renew_at) {
            return Ok(t.clone());
        }
        let token = fetch(http, creds).await?;
        self.keep(key, token.clone());
        Ok(token)
    }

    /// Caches `token`, first dropping the tokens due for renewal and, past `MAX_TOKENS`, the
    /// ones due soonest: only a 401 removed a token before, and every changed client id or
    /// secret left its old one behind.
    fn keep(&self, key: [u8; 32], token: Token) {
        let mut tokens = self.lock();
        let now = Instant::now();
        tokens.retain(|_, t| now < t.renew_at);
        if tokens.len() >= MAX_TOKENS {
            let mut due: Vec<(Instant, [u8; 32])> = tokens.iter().map(|(k, t)| (t.renew_at, *k)).collect();
            due.sort_unstable();
            for (_, k) in due.iter().take(tokens.len() + 1 - MAX_TOKENS) {
                tokens.remove(k);
            }
        }
        tokens.insert(key, token);
    }

    /// Drops a token the MCP server refused, so the next use fetches a new one: the cached
    /// token if it is the one renewed at `used` (any, when `used` is None); a newer one
    /// fetched meanwhile stays.
    pub fn forget_if_current(&self, creds: &Credentials<'_>, used: Option<Instant>) {
        let mut tokens = self.lock();
        let key = creds.key();
        if used.is_none() || tokens.get(&key).map(|t| t.renew_at) == used {
            tokens.remove(&key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Token>> {
        self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn fetch(http: &reqwest::Client, creds: &Credentials<'_>) -> Result<Token, String> {
    let url = creds.token_url;
    let requested = Instant::now();
    let resp = http
        .post(url)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", creds.client_id),
            ("client_secret", creds.client_secret),
        ])
        .send()
        .await
        .map_err(|e| format!("OAuth2 token endpoint {url} is unreachable: {}", without_url(&e)))?;
    let status = resp.status();
    // A token answer is a few hundred bytes; a server streaming more is not a token endpoint.
    let body: Option<TokenResponse> = match read_body(resp, MAX_TOKEN_RESPONSE_BYTES).await {
        Ok(bytes) => serde_json::from_slice(&bytes).ok(),
        Err(e @ BodyError::TooLarge(_)) => return Err(format!("OAuth2 token endpoint {url}: {e}")),
        Err(BodyError::Network(_)) => None,
    };
    let reason = body
        .as_ref()
        .and_then(|b| {
            b.error
                .as_deref()
                .map(|e| format!("{e} {}", b.error_description.as_deref().unwrap_or("")))
        })
        .map(|s| format!(" ({})", s.trim()))
        .unwrap_or_default();
    if !status.is_success() {
        return Err(format!(
            "OAuth2 token endpoint {url} refused the client credentials: HTTP {status}{reason}"
        ));
    }
    let body = body.ok_or_else(|| format!("OAuth2 token endpoint {url} did not answer with JSON"))?;
    let access_token = body
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("OAuth2 token endpoint {url} returned no access_token{reason}"))?;
    let lifetime = lifetime_of(body.expires_in);
    Ok(Token {
        access_token,
        renew_at: requested + lifetime - margin(lifetime),
    })
}

/// How long a token is kept: capped, since a lifetime near u64::MAX seconds would overflow
/// the instant it is added to.
fn lifetime_of(expires_in: Option<u64>) -> Duration {
    expires_in
        .map(|s| Duration::from_secs(s.min(MAX_LIFETIME.as_secs())))
        .unwrap_or(DEFAULT_LIFETIME)
}

fn margin(lifetime: Duration) -> Duration {
    (lifetime / 10).min(MAX_MARGIN)
}

/// reqwest errors name the URL, which is already in the message.
fn without_url(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_are_capped() {
        assert_eq!(lifetime_of(None), DEFAULT_LIFETIME);
        assert_eq!(lifetime_of(Some(60)), Duration::from_secs(60));
        let longest = lifetime_of(Some(u64::MAX));
        assert_eq!(longest, MAX_LIFETIME);
        assert!(std::time::Instant::now().checked_add(longest).is_some());
    }

    #[test]
    fn a_lifetime_may_come_as_a_string_or_a_fraction() {
        let lifetime = |body: &str| {
            serde_json::from_str::<TokenResponse>(body)
                .map(|r| r.expires_in)
                .unwrap()
        };
        assert_eq!(lifetime(r#"{"access_token":"t","expires_in":3599}"#), Some(3599));
        assert_eq!(lifetime(r#"{"access_token":"t","expires_in":"3599"}"#), Some(3599));
        assert_eq!(lifetime(r#"{"access_token":"t","expires_in":3600.0}"#), Some(3600));
        for unreadable in ["-5", "\"soon\"", "null", "[]"] {
            let body = format!(r#"{{"access_token":"t","expires_in":{unreadable}}}"#);
            assert_eq!(lifetime(&body), None, "{unreadable}");
        }
        assert_eq!(lifetime(r#"{"access_token":"t"}"#), None);
    }

    #[test]
    fn the_cache_drops_tokens_due_and_keeps_at_most_its_limit() {
        let cache = TokenCache::default();
        let token = |renew_at| Token {
            access_token: "t".into(),
            renew_at,
        };
        let now = Instant::now();
        let key = |i: usize| {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&(i as u64).to_le_bytes());
            k
        };
        cache.keep(key(0), token(now - Duration::from_secs(1)));
        for i in 1..=MAX_TOKENS + 5 {
            cache.keep(key(i), token(now + Duration::from_secs(60 + i as u64)));
        }
        let kept = cache.lock();
        assert_eq!(kept.len(), MAX_TOKENS);
        assert!(!kept.contains_key(&key(0)), "a token due is dropped");
        assert!(!kept.contains_key(&key(1)), "the one due soonest goes first");
        assert!(kept.contains_key(&key(MAX_TOKENS + 5)), "the newest stays");
    }

    #[test]
    fn renews_shortly_before_expiry() {
        assert_eq!(margin(Duration::from_secs(3600)), MAX_MARGIN);
        assert_eq!(margin(Duration::from_secs(5)), Duration::from_millis(500));
        let a = Credentials {
            client_id: "a",
            client_secret: "b",
            token_url: "http://x/token",
        };
        let b = Credentials {
            client_secret: "c",
            ..a
        };
        assert_ne!(a.key(), b.key());
    }
}
