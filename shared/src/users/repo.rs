//! SQL of the users module.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::UserRow;

/// (id, username, role, token version).
pub type Identity = (i64, String, i16, i64);

const COLUMNS: &str =
    "id, username, password_hash, email, role, tokens, totals, expire_dt, create_dt, update_dt, token_version";

/// (id, username, role, token version) of an existing user: what authentication needs.
pub async fn find_identity(db: &PgPool, id: i64) -> sqlx::Result<Option<Identity>> {
    sqlx::query_as("SELECT id, username, role, token_version FROM users WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

pub async fn find(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM users WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

pub async fn find_by_username(db: &PgPool, username: &str) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM users WHERE lower(username) = lower($1)"
    ))
    .bind(username)
    .fetch_optional(db)
    .await
}

/// Takes a transaction lock on an email address (case-insensitive), held until it ends.
pub async fn lock_email(conn: &mut sqlx::PgConnection, email: &str) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('user-email:' || lower($1)))")
        .bind(email)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn find_by_email(db: impl PgExecutor<'_>, email: &str) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM users WHERE lower(email) = lower($1) FOR UPDATE"
    ))
    .bind(email)
    .fetch_optional(db)
    .await
}

pub struct NewUser<'a> {
    pub username: &'a str,
    pub password_hash: &'a str,
    pub email: Option<&'a str>,
    pub role: i16,
    pub totals: i64,
    pub expire_dt: Option<DateTime<Utc>>,
}

pub async fn insert(db: impl PgExecutor<'_>, u: &NewUser<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO users (username, password_hash, email, role, tokens, totals, expire_dt)
         VALUES ($1, $2, $3, $4, $5, $5, $6) RETURNING id",
    )
    .bind(u.username)
    .bind(u.password_hash)
    .bind(u.email)
    .bind(u.role)
    .bind(u.totals)
    .bind(u.expire_dt)
    .fetch_one(db)
    .await
}

/// Inserts unless the username is taken; true when a row was written.
pub async fn insert_if_absent(db: &PgPool, u: &NewUser<'_>) -> sqlx::Result<bool> {
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO users (username, password_hash, email, role) VALUES ($1, $2, $3, $4)
         ON CONFLICT DO NOTHING RETURNING id",
    )
    .bind(u.username)
    .bind(u.password_hash)
    .bind(u.email)
    .bind(u.role)
    .fetch_optional(db)
    .await?;
    Ok(id.is_some())
}

pub async fn page(db: &PgPool, email: Option<&str>, limit: i64, offset: i64) -> sqlx::Result<(Vec<UserRow>, i64)> {
    let filter = |qb: &mut QueryBuilder<'_, Postgres>| {
        if let Some(e) = email {
            qb.push(" WHERE email ILIKE ")
                .push_bind(format!("%{}%", escape_like(e)));
        }
    };
    let mut count = QueryBuilder::new("SELECT count(*) FROM users");
    filter(&mut count);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    let mut rows = QueryBuilder::new(format!("SELECT {COLUMNS} FROM users"));
    filter(&mut rows);
    rows.push(" ORDER BY id DESC LIMIT ")
        .push_bind(limit)
        .push(" OFFSET ")
        .push_bind(offset);
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}

/// Escapes `%`, `_` and `\` so user text matches literally inside LIKE patterns.
pub fn escape_like(value: &str) -> String {
    value.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}

/// `email`: `None` keeps it, `Some(None)` removes it.
pub async fn update_profile(
    db: impl PgExecutor<'_>,
    id: i64,
    role: i16,
    email: Option<Option<&str>>,
    password_hash: Option<&str>,
) -> sqlx::Result<bool> {
    let n = sqlx::query(
        "UPDATE users SET role = $2, email = CASE WHEN $5 THEN $3 ELSE email END,
         password_hash = COALESCE($4, password_hash), update_dt = now() WHERE id = $1",
    )
    .bind(id)
    .bind(role)
    .bind(email.flatten())
    .bind(password_hash)
    .bind(email.is_some())
    .execute(db)
    .await?;
    Ok(n.rows_affected() == 1)
}

pub async fn set_role(db: impl PgExecutor<'_>, id: i64, role: i16) -> sqlx::Result<bool> {
    let n = sqlx::query("UPDATE users SET role = $2, update_dt = now() WHERE id = $1")
        .bind(id)
        .bind(role)
        .execute(db)
        .await?;
    Ok(n.rows_affected() == 1)
}

pub async fn set_password(db: impl PgExecutor<'_>, id: i64, password_hash: &str) -> sqlx::Result<bool> {
    let n = sqlx::query("UPDATE users SET password_hash = $2, update_dt = now() WHERE id = $1")
        .bind(id)
        .bind(password_hash)
        .execute(db)
        .await?;
    Ok(n.rows_affected() == 1)
}

/// Adds `totals` tokens to the quota and moves the expiry; false (and nothing changed) when the
/// quota would pass `max`. Written as `x <= max - totals`, the check cannot overflow itself.
pub async fn grant_quota(
    db: impl PgExecutor<'_>,
    id: i64,
    totals: i64,
    expire_dt: DateTime<Utc>,
    max: i64,
) -> sqlx::Result<bool> {
    let n = sqlx::query(
        "UPDATE users SET tokens = tokens + $2, totals = totals + $2, expire_dt = $3, update_dt = now()
         WHERE id = $1 AND tokens <= $4 - $2 AND totals <= $4 - $2",
    )
    .bind(id)
    .bind(totals)
    .bind(expire_dt)
    .bind(max)
    .execute(db)
    .await?;
    Ok(n.rows_affected() == 1)
}

/// Serialises role changes so two demotions cannot both pass the last-admin check.
pub async fn lock_admins(db: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM (SELECT id FROM users WHERE role = 1 FOR UPDATE) a")
        .fetch_one(db)
        .await
}

/// A refresh token of login `family`, valid until `expires_at`, the login itself until
/// `login_expires_at`.
pub async fn insert_refresh(
    db: impl PgExecutor<'_>,
    family: Uuid,
    user_id: i64,
    hash: &str,
    (expires_at, login_expires_at): (DateTime<Utc>, DateTime<Utc>),
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO refresh_tokens (family_id, user_id, token_hash, expires_at, login_expires_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(family)
    .bind(user_id)
    .bind(hash)
    .bind(expires_at)
    .bind(login_expires_at)
    .execute(db)
    .await?;
    Ok(())
}

#[derive(sqlx::FromRow)]
pub struct RefreshRow {
    pub family_id: Uuid,
    pub user_id: i64,
    pub expires_at: DateTime<Utc>,
    /// When the login ends; None for a login made before it was kept.
    pub login_expires_at: Option<DateTime<Utc>>,
    pub revoked: bool,
    /// True when this call marked the token used; false when it had been used before.
    pub claimed: bool,
}

/// The user a refresh token was issued to, and whether it can still be exchanged (not used,
/// revoked or expired); read without locking anything.
pub async fn refresh_owner(db: impl PgExecutor<'_>, hash: &str) -> sqlx::Result<Option<(i64, bool)>> {
    sqlx::query_as(
        "SELECT user_id, used_at IS NULL AND revoked_at IS NULL AND expires_at > now()
         FROM refresh_tokens WHERE token_hash = $1",
    )
    .bind(hash)
    .fetch_optional(db)
    .await
}

/// The user's token version, their row locked (FOR SHARE) until the transaction ends. Whoever
/// issues a refresh token holds it: a revocation, which bumps the version first and revokes
/// the tokens in a statement of its own, then waits for the issue and revokes its token too,
/// or came first and is seen here. Users' rows before refresh tokens' rows, always: the
/// order revocations take them in.
pub async fn lock_token_version(conn: &mut sqlx::PgConnection, user_id: i64) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar("SELECT token_version FROM users WHERE id = $1 FOR SHARE")
        .bind(user_id)
        .fetch_optional(conn)
        .await
}

/// Marks a refresh token used, atomically; reports whether it was fresh.
pub async fn claim_refresh(db: impl PgExecutor<'_>, hash: &str) -> sqlx::Result<Option<RefreshRow>> {
    sqlx::query_as(
        "WITH prev AS (SELECT id, used_at FROM refresh_tokens WHERE token_hash = $1 FOR UPDATE)
         UPDATE refresh_tokens r SET used_at = COALESCE(r.used_at, now())
         FROM prev WHERE r.id = prev.id
         RETURNING r.family_id, r.user_id, r.expires_at, r.login_expires_at, r.revoked_at IS NOT NULL AS revoked,
                   prev.used_at IS NULL AS claimed",
    )
    .bind(hash)
    .fetch_optional(db)
    .await
}

/// Used refresh tokens a login keeps, newest first: a replay of one of them revokes the login,
/// and so does one older than that, which names the login (`auth::refresh::family_of`). Kept
/// without end, a client refreshing in a loop added a row per call for as long as it ran (and
/// 14 days more).
pub const KEPT_USED_TOKENS: i64 = 32;

/// Deletes the login's used refresh tokens but the newest `KEPT_USED_TOKENS`.
pub async fn forget_old_used(db: impl PgExecutor<'_>, family: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "DELETE FROM refresh_tokens WHERE family_id = $1 AND used_at IS NOT NULL AND id <=
           (SELECT id FROM refresh_tokens WHERE family_id = $1 AND used_at IS NOT NULL
            ORDER BY id DESC OFFSET $2 LIMIT 1)",
    )
    .bind(family)
    .bind(KEPT_USED_TOKENS)
    .execute(db)
    .await?;
    Ok(())
}

/// Logins a user keeps, newest first; a new one signs the oldest out (its refresh token is then
/// refused as unknown). Successful logins are not rate limited (each costs a password hash), so
/// a script logging in again and again added a login's rows for each call, for 14 days.
pub const KEPT_LOGINS: i64 = 100;

/// Deletes the refresh tokens of the user's logins but the newest `KEPT_LOGINS`.
pub async fn forget_old_logins(db: impl PgExecutor<'_>, user_id: i64) -> sqlx::Result<()> {
    sqlx::query(
        "DELETE FROM refresh_tokens WHERE user_id = $1 AND family_id NOT IN
           (SELECT family_id FROM refresh_tokens WHERE user_id = $1
            GROUP BY family_id ORDER BY max(id) DESC LIMIT $2)",
    )
    .bind(user_id)
    .bind(KEPT_LOGINS)
    .execute(db)
    .await?;
    Ok(())
}

/// Deletes the refresh tokens of logins whose every token has expired: none of them can be
/// used any more, so reuse detection has nothing left to protect. A family with one live token
/// keeps its newest used ones (`forget_old_used`), which is what lets a replayed old token
/// revoke the login.
pub async fn purge_expired_families(db: impl PgExecutor<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM refresh_tokens WHERE family_id IN
           (SELECT family_id FROM refresh_tokens GROUP BY family_id HAVING max(expires_at) < now())",
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// The user of the login `family` while it has a token not revoked (it has not been signed
/// out, revoked or purged).
pub async fn live_family_user(db: impl PgExecutor<'_>, family: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar("SELECT user_id FROM refresh_tokens WHERE family_id = $1 AND revoked_at IS NULL LIMIT 1")
        .bind(family)
        .fetch_optional(db)
        .await
}

/// Revokes one login's refresh tokens and ends its user's access tokens (all of them: an access
/// token does not name its login, and a leaked refresh token may have minted any of them).
/// Two statements, as in `revoke_all_for_user`.
pub async fn revoke_family(conn: &mut sqlx::PgConnection, family: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE users SET token_version = token_version + 1
         WHERE id = (SELECT user_id FROM refresh_tokens WHERE family_id = $1 LIMIT 1)",
    )
    .bind(family)
    .execute(&mut *conn)
    .await?;
    sqlx::query("UPDATE refresh_tokens SET revoked_at = now() WHERE family_id = $1 AND revoked_at IS NULL")
        .bind(family)
        .execute(conn)
        .await?;
    Ok(())
}

/// Revokes every login of the user, refresh and access tokens alike (a password change). Two
/// statements: the version's bump waits for any refresh or login issuing a token meanwhile
/// (they hold the user's row, see `lock_token_version`), and the revoke that follows reads
/// after it, the token that issue wrote included. In one statement it would read before.
pub async fn revoke_all_for_user(conn: &mut sqlx::PgConnection, user_id: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE users SET token_version = token_version + 1 WHERE id = $1")
        .bind(user_id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("UPDATE refresh_tokens SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL")
        .bind(user_id)
        .execute(conn)
        .await?;
    Ok(())
}
