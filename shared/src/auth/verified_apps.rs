//! What this process verified about apps in the last few seconds: their credentials, and the
//! ids of their external users.
//!
//! Every external API request names its app and token, and every external chat its openId;
//! reading the app's row (and decrypting its token) and the user's row for each one were two
//! round trips per chat, the largest part of what an external chat cost the service beyond an
//! administrator's. A verified pair is remembered for [`FRESH_FOR`]: within that time the same
//! token is accepted without asking the database, and the app's users found or created
//! meanwhile are known by id. The price is that a change made by another process (a Lambda
//! function of the app module disabling or deleting the app) reaches this one within those
//! seconds; changes made by this process (the local server, where every module shares one
//! state) forget the app at once. A user's id is trusted as long, counted from when it was
//! read: external users are never deleted while their app exists, except the one a refused
//! first chat created, which this process forgets with it, but another process may have read
//! that user's id in the same moment (the same openId's first requests on two instances), and
//! an id kept for good would then fail each of that user's requests there.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::crypto::constant_time_eq;

/// How long a verified token is accepted without reading its app again.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// Beyond this many apps a new one first drops the stale ones: the map holds only apps whose
/// valid credentials were presented, so it stays as small as the number of busy apps.
const PRUNE_APPS_ABOVE: usize = 1024;

/// Users remembered per app; beyond it the app's list starts again.
const USERS_PER_APP: usize = 10_000;

/// An app whose credentials were verified: its row id, its `Svc-App-Id`, and who created it.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedApp {
    pub id: i64,
    pub app_id: String,
    pub creator_id: i64,
}

struct Verified {
    app: VerifiedApp,
    /// The token's digest, not the token: what stays in memory cannot be replayed.
    token: [u8; 32],
    at: Instant,
    /// External user ids by openId, with when each was read.
    users: HashMap<String, (i64, Instant)>,
}

pub struct VerifiedApps {
    apps: Mutex<HashMap<String, Verified>>,
    fresh_for: Duration,
}

impl Default for VerifiedApps {
    fn default() -> Self {
        Self {
            apps: Mutex::default(),
            fresh_for: FRESH_FOR,
        }
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl VerifiedApps {
    /// The app, if this token was verified for it within [`FRESH_FOR`].
    pub fn get(&self, app_id: &str, token: &str) -> Option<VerifiedApp> {
        let presented = digest(token);
        let apps = self.apps.lock().ok()?;
        let entry = apps.get(app_id)?;
        let fresh = entry.at.elapsed() < self.fresh_for;
        (fresh && constant_time_eq(&entry.token, &presented)).then(|| entry.app.clone())
    }

    /// Remembers credentials just verified against the database; the users known of the same
    /// app are kept.
    pub fn put(&self, app: &VerifiedApp, token: &str) {
        let Ok(mut apps) = self.apps.lock() else {
            return;
        };
        if apps.len() >= PRUNE_APPS_ABOVE {
            apps.retain(|_, v| v.at.elapsed() < self.fresh_for);
        }
        let users = apps
            .remove(&app.app_id)
            .filter(|v| v.app.id == app.id)
            .map(|v| v.users)
            .unwrap_or_default();
        let entry = Verified {
            app: app.clone(),
            token: digest(token),
            at: Instant::now(),
            users,
        };
        apps.insert(app.app_id.clone(), entry);
    }

    /// The id of the user with this openId of the app (row id and `Svc-App-Id`), if read
    /// within [`FRESH_FOR`].
    pub fn user(&self, (id, app_id): (i64, &str), open_id: &str) -> Option<i64> {
        let apps = self.apps.lock().ok()?;
        let entry = apps.get(app_id).filter(|v| v.app.id == id)?;
        let (user, at) = entry.users.get(open_id)?;
        (at.elapsed() < self.fresh_for).then_some(*user)
    }

    /// Remembers a user of an app this process verified.
    pub fn put_user(&self, (app, app_id): (i64, &str), open_id: &str, id: i64) {
        let Ok(mut apps) = self.apps.lock() else {
            return;
        };
        if let Some(entry) = apps.get_mut(app_id).filter(|v| v.app.id == app) {
            if entry.users.len() >= USERS_PER_APP {
                entry.users.clear();
            }
            entry.users.insert(open_id.to_owned(), (id, Instant::now()));
        }
    }

    /// Forgets a user that was deleted.
    pub fn forget_user(&self, app_id: &str, open_id: &str) {
        if let Ok(mut apps) = self.apps.lock() {
            if let Some(entry) = apps.get_mut(app_id) {
                entry.users.remove(open_id);
            }
        }
    }

    /// Forgets the app with this row id (disabled, deleted) and its users.
    pub fn forget(&self, id: i64) {
        if let Ok(mut apps) = self.apps.lock() {
            apps.retain(|_, v| v.app.id != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(id: i64) -> VerifiedApp {
        VerifiedApp {
            id,
            app_id: format!("app-{id}"),
            creator_id: 1,
        }
    }

    fn key(app: &VerifiedApp) -> (i64, &str) {
        (app.id, &app.app_id)
    }

    #[test]
    fn only_the_verified_token_of_a_remembered_app_is_accepted() {
        let cache = VerifiedApps::default();
        assert!(cache.get("app-1", "secret").is_none());
        cache.put(&app(1), "secret");
        assert_eq!(cache.get("app-1", "secret").map(|a| a.id), Some(1));
        assert!(cache.get("app-1", "secreT").is_none());
        assert!(cache.get("app-2", "secret").is_none());
    }

    #[test]
    fn a_forgotten_app_is_read_again_and_its_users_too() {
        let cache = VerifiedApps::default();
        cache.put(&app(1), "one");
        cache.put_user(key(&app(1)), "ann", 7);
        cache.put(&app(2), "two");
        cache.forget(1);
        assert!(cache.get("app-1", "one").is_none());
        cache.put(&app(1), "one");
        assert_eq!(cache.user(key(&app(1)), "ann"), None);
        assert!(cache.get("app-2", "two").is_some());
    }

    #[test]
    fn users_are_known_per_app_and_survive_a_new_check_of_the_token() {
        let cache = VerifiedApps::default();
        cache.put_user(key(&app(1)), "ann", 7);
        assert_eq!(cache.user(key(&app(1)), "ann"), None, "only users of verified apps");
        cache.put(&app(1), "one");
        cache.put(&app(2), "two");
        cache.put_user(key(&app(1)), "ann", 7);
        assert_eq!(cache.user(key(&app(1)), "ann"), Some(7));
        assert_eq!(cache.user(key(&app(2)), "ann"), None);
        cache.put(&app(1), "one");
        assert_eq!(cache.user(key(&app(1)), "ann"), Some(7));
        cache.forget_user("app-1", "ann");
        assert_eq!(cache.user(key(&app(1)), "ann"), None);
    }

    #[test]
    fn an_app_id_taken_by_a_new_app_does_not_inherit_users() {
        let cache = VerifiedApps::default();
        cache.put(&app(1), "one");
        cache.put_user(key(&app(1)), "ann", 7);
        let successor = VerifiedApp { id: 9, ..app(1) };
        cache.put(&successor, "new");
        assert_eq!(cache.user(key(&successor), "ann"), None);
    }

    #[test]
    fn a_stale_entry_is_not_accepted() {
        let cache = VerifiedApps {
            fresh_for: Duration::ZERO,
            ..Default::default()
        };
        cache.put(&app(1), "one");
        assert!(cache.get("app-1", "one").is_none());
    }

    /// A user deleted by another process (a refused first chat there) is read again once its
    /// id is no longer fresh, not used for good.
    #[test]
    fn a_stale_user_is_not_accepted() {
        // Long enough that a busy machine does not let the entry age between the put and the
        // read (50 ms did, under load).
        let fresh_for = Duration::from_secs(1);
        let cache = VerifiedApps {
            fresh_for,
            ..Default::default()
        };
        cache.put(&app(1), "one");
        cache.put_user(key(&app(1)), "ann", 7);
        assert_eq!(cache.user(key(&app(1)), "ann"), Some(7));
        std::thread::sleep(fresh_for + Duration::from_millis(50));
        cache.put(&app(1), "one");
        assert_eq!(
            cache.user(key(&app(1)), "ann"),
            None,
            "read again, though the app was just verified"
        );
    }
}
