//! App credentials this process verified in the last few seconds.
//!
//! Every external API request names its app and token; reading the app's row for each one was a
//! round trip and a decryption per request, the largest part of what an external chat costs the
//! service beyond an administrator's. A verified pair is remembered for [`FRESH_FOR`]: within
//! that time the same token is accepted without asking the database. The price is that a
//! change made by another process (a Lambda function of the app module disabling or deleting
//! the app) reaches this one within those seconds; changes made by this process (the local
//! server, where every module shares one state) forget the app at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::crypto::constant_time_eq;
use crate::domain::AppCaller;

/// How long a verified token is accepted without reading its app again.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// Beyond this many entries a new one first drops the stale ones: the map holds only apps
/// whose valid credentials were presented, so it stays as small as the number of busy apps.
const PRUNE_ABOVE: usize = 1024;

struct Verified {
    caller: AppCaller,
    /// The token's digest, not the token: what stays in memory cannot be replayed.
    token: [u8; 32],
    at: Instant,
}

pub struct AppCredentials {
    verified: Mutex<HashMap<String, Verified>>,
    fresh_for: Duration,
}

impl Default for AppCredentials {
    fn default() -> Self {
        Self {
            verified: Mutex::default(),
            fresh_for: FRESH_FOR,
        }
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl AppCredentials {
    /// The app, if this token was verified for it within [`FRESH_FOR`].
    pub fn get(&self, app_id: &str, token: &str) -> Option<AppCaller> {
        let presented = digest(token);
        let verified = self.verified.lock().ok()?;
        let entry = verified.get(app_id)?;
        let fresh = entry.at.elapsed() < self.fresh_for;
        (fresh && constant_time_eq(&entry.token, &presented)).then(|| entry.caller.clone())
    }

    /// Remembers credentials just verified against the database.
    pub fn put(&self, caller: &AppCaller, token: &str) {
        let Ok(mut verified) = self.verified.lock() else {
            return;
        };
        if verified.len() >= PRUNE_ABOVE {
            verified.retain(|_, v| v.at.elapsed() < self.fresh_for);
        }
        let entry = Verified {
            caller: caller.clone(),
            token: digest(token),
            at: Instant::now(),
        };
        verified.insert(caller.app_id.clone(), entry);
    }

    /// Forgets the app with this row id (disabled, deleted).
    pub fn forget(&self, id: i64) {
        if let Ok(mut verified) = self.verified.lock() {
            verified.retain(|_, v| v.caller.id != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(id: i64) -> AppCaller {
        AppCaller {
            id,
            app_id: format!("app-{id}"),
            creator_id: 1,
        }
    }

    #[test]
    fn only_the_verified_token_of_a_remembered_app_is_accepted() {
        let cache = AppCredentials::default();
        assert!(cache.get("app-1", "secret").is_none());
        cache.put(&app(1), "secret");
        assert_eq!(cache.get("app-1", "secret").map(|a| a.id), Some(1));
        assert!(cache.get("app-1", "secreT").is_none());
        assert!(cache.get("app-2", "secret").is_none());
    }

    #[test]
    fn a_forgotten_app_is_read_again() {
        let cache = AppCredentials::default();
        cache.put(&app(1), "one");
        cache.put(&app(2), "two");
        cache.forget(1);
        assert!(cache.get("app-1", "one").is_none());
        assert!(cache.get("app-2", "two").is_some());
    }

    #[test]
    fn a_stale_entry_is_not_accepted() {
        let cache = AppCredentials {
            fresh_for: Duration::ZERO,
            ..Default::default()
        };
        cache.put(&app(1), "one");
        assert!(cache.get("app-1", "one").is_none());
    }
}
