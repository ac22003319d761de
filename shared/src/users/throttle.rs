//! Login throttling, kept in Postgres so every function instance sees the same counts.
//!
//! Three counters, checked in this order, each with its own limit:
//! - account and address (`LOGIN_MAX_FAILURES`): someone guessing one password from one place;
//! - address (`LOGIN_IP_MAX_FAILURES`): one place guessing across accounts;
//! - account across addresses (`LOGIN_ACCOUNT_MAX_FAILURES`, higher): guessing one password
//!   from many places. Addresses the account recently logged in from are exempt, so this lock
//!   cannot keep the owner out of an address they use.
//!
//! A signed-in user's own password change counts wrong old passwords the same way (`pw:<id>`,
//! `LOGIN_MAX_FAILURES`): someone holding a stolen session guesses no faster than a login.
//!
//! An attempt takes its place in every counter before the password is checked, in one upsert
//! per counter that increments and returns the count under the row's lock. Concurrent attempts
//! therefore cannot all pass a check made before any of them failed: exactly `limit` get to try.
//! A success gives its places back (and clears the account-and-address counter), so only
//! failures count.

use std::time::Duration;

use sqlx::PgPool;

use crate::AppError;

/// How long a successful login keeps its address known to the account.
const KNOWN_ADDRESS_DAYS: i32 = 30;

/// One counter and the number of failures it allows per lock period.
pub struct Counter {
    pub key: String,
    pub limit: i32,
}

/// Takes a place in each counter, in order; refuses (429) at the first one that is locked or
/// full, giving back the places already taken. A failed login keeps its places; a successful
/// one hands them to `succeeded`.
pub async fn reserve(db: &PgPool, counters: &[Counter], lock: Duration) -> Result<(), AppError> {
    for (taken, counter) in counters.iter().enumerate() {
        if let Err(refusal) = take(db, counter, lock).await {
            release(db, &counters[..taken]).await?;
            return Err(refusal);
        }
    }
    Ok(())
}

async fn take(db: &PgPool, counter: &Counter, lock: Duration) -> Result<(), AppError> {
    let secs = lock.as_secs_f64();
    // A locked key is left as it is; an old window starts again at this attempt.
    let (failures, locked_for): (i32, Option<f64>) = sqlx::query_as(
        "INSERT INTO login_throttle AS t (key, failures, window_start) VALUES ($1, 1, now())
         ON CONFLICT (key) DO UPDATE SET
           failures = CASE WHEN t.locked_until > now() THEN t.failures
                           WHEN t.window_start < now() - make_interval(secs => $2) THEN 1
                           ELSE t.failures + 1 END,
           window_start = CASE WHEN t.locked_until > now() THEN t.window_start
                               WHEN t.window_start < now() - make_interval(secs => $2) THEN now()
                               ELSE t.window_start END
         RETURNING failures,
                   CASE WHEN locked_until > now() THEN extract(epoch FROM locked_until - now())::float8 END",
    )
    .bind(&counter.key)
    .bind(secs)
    .fetch_one(db)
    .await?;
    if let Some(wait) = locked_for {
        return Err(refusal(wait));
    }
    if failures <= counter.limit {
        return Ok(());
    }
    sqlx::query(
        "UPDATE login_throttle SET locked_until = now() + make_interval(secs => $2), failures = 0,
         window_start = now() WHERE key = $1",
    )
    .bind(&counter.key)
    .bind(secs)
    .execute(db)
    .await?;
    Err(refusal(secs))
}

fn refusal(wait_secs: f64) -> AppError {
    let secs = (wait_secs.ceil() as u64).max(1);
    AppError::RateLimited {
        message: format!("too many failed logins; try again in {secs} seconds"),
        retry_after_secs: secs,
    }
}

/// Gives back one place in each counter; a counter left with nothing (and no lock) goes, as it
/// would have if the attempt had never been made. The delete re-checks the row under its lock,
/// so an attempt counted in between keeps its row.
pub async fn release(db: &PgPool, counters: &[Counter]) -> Result<(), AppError> {
    let keys: Vec<&str> = counters.iter().map(|c| c.key.as_str()).collect();
    sqlx::query("UPDATE login_throttle SET failures = GREATEST(failures - 1, 0) WHERE key = ANY($1)")
        .bind(&keys)
        .execute(db)
        .await?;
    sqlx::query(
        "DELETE FROM login_throttle WHERE key = ANY($1) AND failures = 0
           AND (locked_until IS NULL OR locked_until <= now())",
    )
    .bind(&keys)
    .execute(db)
    .await?;
    Ok(())
}

/// A login succeeded: the first counter (account and address) starts again from nothing, the
/// places taken in the others are given back, and the address becomes known to the account.
pub async fn succeeded(db: &PgPool, counters: &[Counter], user_id: i64, address: &str) -> Result<(), AppError> {
    let Some((first, others)) = counters.split_first() else {
        return Ok(());
    };
    sqlx::query("DELETE FROM login_throttle WHERE key = $1")
        .bind(&first.key)
        .execute(db)
        .await?;
    release(db, others).await?;
    sqlx::query(
        "INSERT INTO login_known_addresses (user_id, address) VALUES ($1, $2)
         ON CONFLICT (user_id, address) DO UPDATE SET last_login = now()",
    )
    .bind(user_id)
    .bind(address)
    .execute(db)
    .await?;
    Ok(())
}

/// The account `username` names, folded as the user lookup folds it (Postgres's `lower`,
/// which follows the database's collation: a key folded by Rust's rules gave `admİn` counters
/// of its own while the lookup found `admin`), and whether it logged in from `address`
/// recently.
pub async fn account_and_known_address(db: &PgPool, username: &str, address: &str) -> Result<(String, bool), AppError> {
    let known = sqlx::query_as(
        "SELECT lower($1), EXISTS (SELECT 1 FROM login_known_addresses k JOIN users u ON u.id = k.user_id
          WHERE lower(u.username) = lower($1) AND k.address = $2
            AND k.last_login > now() - make_interval(days => $3))",
    )
    .bind(username)
    .bind(address)
    .bind(KNOWN_ADDRESS_DAYS)
    .fetch_one(db)
    .await?;
    Ok(known)
}

/// Deletes counters that no longer change an answer: not locked now, and with a window older
/// than the lock period (the next failure would start a new window anyway); and addresses
/// no longer known.
pub async fn purge_stale(db: &PgPool, lock: Duration) -> sqlx::Result<u64> {
    let counters = sqlx::query(
        "DELETE FROM login_throttle
         WHERE (locked_until IS NULL OR locked_until <= now())
           AND window_start < now() - make_interval(secs => $1)",
    )
    .bind(lock.as_secs_f64())
    .execute(db)
    .await?;
    let addresses =
        sqlx::query("DELETE FROM login_known_addresses WHERE last_login < now() - make_interval(days => $1)")
            .bind(KNOWN_ADDRESS_DAYS)
            .execute(db)
            .await?;
    Ok(counters.rows_affected() + addresses.rows_affected())
}
