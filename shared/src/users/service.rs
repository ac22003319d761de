//! Business rules of users and authentication.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::repo::{self, NewUser};
use super::throttle;
use super::*;
use crate::admission::{self, Subject};
use crate::auth::refresh;
use crate::crypto::password;
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::error::is_unique_violation;
use crate::{validate, AppError, AppResult, AppState};

const BAD_LOGIN: &str = "username or password is incorrect";

fn validate_username(username: &str) -> AppResult<()> {
    validate::length("username", username, 3, 64)?;
    let ok = username.chars().all(|c| c.is_alphanumeric() || "_.@-".contains(c));
    if !ok {
        return Err(AppError::validation(
            "username may contain only letters, digits and _ . @ -",
        ));
    }
    Ok(())
}

/// 8 to 128 characters, not all of them spaces: blank passwords passed the length rule.
fn validate_password(field: &str, password: &str) -> AppResult<()> {
    validate::length(field, password, 8, 128)?;
    if password.trim().is_empty() {
        return Err(AppError::validation(format!("{field} must not be only spaces")));
    }
    Ok(())
}

/// A password is not its account's username (ignoring case): the first one anyone tries.
fn not_the_username(field: &str, password: &str, username: &str) -> AppResult<()> {
    if username.to_lowercase() == password.to_lowercase() {
        return Err(AppError::validation(format!("{field} must not be the username")));
    }
    Ok(())
}

fn optional_email(email: Option<String>) -> AppResult<Option<String>> {
    let email = validate::optional(email);
    if let Some(e) = &email {
        validate::email("email", e)?;
    }
    Ok(email)
}

fn user_conflict(err: sqlx::Error) -> AppError {
    if is_unique_violation(&err, "users_username_key") {
        AppError::business("username is already taken")
    } else if is_unique_violation(&err, "users_email_key") {
        AppError::business("email is already used by another user")
    } else {
        err.into()
    }
}

/// Logs in. `ip` is the caller's address as the platform saw it (see `http::client_ip`); the
/// throttle counts attempts per account and address first, so a lock someone else causes from
/// elsewhere leaves the owner's own address open (see `throttle`).
pub async fn login(state: &AppState, req: LoginRequest, ip: &str) -> AppResult<LoginResult> {
    let username = validate::required("username", req.username)?;
    // No account has a longer name (an email, at most); a name of kilobytes would not fit the
    // throttle's key index.
    validate::length("username", &username, 1, validate::MAX_EMAIL)?;
    let password = validate::present("password", req.password.filter(|p| !p.is_empty()))?;
    let cfg = state.config();
    let (account, known) = throttle::account_and_known_address(state.db(), &username, ip).await?;
    // The account-and-address counter comes first: `throttle::succeeded` clears it.
    let mut counters = vec![
        throttle::Counter {
            key: format!("ua:{account}|{ip}"),
            limit: cfg.login_max_failures,
        },
        throttle::Counter {
            key: format!("ip:{ip}"),
            limit: cfg.login_ip_max_failures,
        },
    ];
    if !known {
        counters.push(throttle::Counter {
            key: format!("u:{account}"),
            limit: cfg.login_account_max_failures,
        });
    }
    throttle::reserve(state.db(), &counters, cfg.login_lock).await?;

    let user = repo::find_by_username(state.db(), &username).await?;
    let verified = match &user {
        Some(u) => password::verify_off_thread(password, u.password_hash.clone()).await,
        None => {
            let _ = tokio::task::spawn_blocking(move || password::burn_time(&password)).await;
            false
        }
    };
    // A failure keeps its places in the counters.
    let Some(user) = user.filter(|_| verified) else {
        return Err(AppError::unauthorized(BAD_LOGIN));
    };
    throttle::succeeded(state.db(), &counters, user.id, ip).await?;
    // The password was checked against the row as read: a change (or a revocation) since then
    // refuses the login, which would otherwise get a refresh token the change never revoked.
    let mut tx = state.db().begin().await?;
    if repo::lock_token_version(&mut tx, user.id).await? != Some(user.token_version) {
        return Err(AppError::unauthorized(
            "the password changed meanwhile (or this user's logins were revoked); log in again",
        ));
    }
    let login_expires = Utc::now() + state.config().login_max_age;
    let refresh_token = new_refresh(state, &mut *tx, (uuid::Uuid::new_v4(), login_expires), user.id).await?;
    repo::forget_old_logins(&mut *tx, user.id).await?;
    tx.commit().await?;
    let token = state.jwt().issue_access(user.id, user.role, user.token_version)?;
    Ok(LoginResult {
        token,
        refresh_token,
        email: user.email,
    })
}

/// A new refresh token of the login `family`, which ends at `login_expires`: no token of it
/// outlives that, however often it is refreshed. Each refresh used to give 14 more days, so a
/// stolen login, refreshed, lasted for good.
async fn new_refresh<'e>(
    state: &AppState,
    db: impl sqlx::PgExecutor<'e>,
    (family, login_expires): (uuid::Uuid, DateTime<Utc>),
    user_id: i64,
) -> AppResult<String> {
    let (token, hash) = refresh::generate(family);
    let expires = (Utc::now() + state.config().refresh_token_ttl).min(login_expires);
    repo::insert_refresh(db, family, user_id, &hash, (expires, login_expires)).await?;
    Ok(token)
}

/// A refresh of a token that can still be exchanged counts to its user's rate-limit window like
/// the user's other requests. It carries no access token, so the limiter does not see it; a
/// client refreshing in a loop made a new token and two writes per call for as long as it ran.
/// Refused, the presented token stays unused. A dead token (used, revoked, expired) is not
/// counted, as a revoked access token is not: whoever still held one could otherwise keep its
/// user's window full, and a used one must reach the check that revokes its login.
async fn count_refresh(state: &AppState, owner: i64) -> AppResult<()> {
    let limit = state.config().rate_limits.per_user;
    if limit > 0 {
        admission::count(state, &Subject::user(owner, limit, None)).await?;
    }
    Ok(())
}

/// Exchanges a refresh token for a new pair. Each refresh token works once; presenting a used
/// one again means it leaked, so every token of that login is revoked.
pub async fn refresh(state: &AppState, req: RefreshRequest) -> AppResult<TokenPair> {
    let presented = validate::required("refreshToken", req.refresh_token)?;
    let hash = refresh::hash(&presented);
    // Counted before the transaction, which must not wait for a second connection of the pool
    // (a token's owner never changes, so it is read outside it).
    let owner = repo::refresh_owner(state.db(), &hash).await?;
    if let Some((owner, true)) = owner {
        count_refresh(state, owner).await?;
    }
    let mut tx = state.db().begin().await?;
    // The user's row first: a password change meanwhile revokes the token this issues too.
    if let Some((owner, _)) = owner {
        repo::lock_token_version(&mut tx, owner).await?;
    }
    let reused =
        || AppError::unauthorized("refresh token was already used; this login was revoked, please log in again");
    let Some(row) = repo::claim_refresh(&mut *tx, &hash).await? else {
        // A token of a login that is still live, no longer stored: a used one older than those
        // the login keeps. Refused as unknown, a thief who refreshed past the kept ones before
        // its owner did outran the reuse check for good.
        if let Some(family) = refresh::family_of(&presented) {
            if let Some(user_id) = repo::live_family_user(&mut *tx, family).await? {
                repo::revoke_family(&mut tx, family).await?;
                tx.commit().await?;
                tracing::warn!(user_id, %family, "a forgotten refresh token reused; its login was revoked");
                return Err(reused());
            }
        }
        return Err(AppError::unauthorized("refresh token invalid; please log in again"));
    };
    if !row.claimed && !row.revoked {
        repo::revoke_family(&mut tx, row.family_id).await?;
        tx.commit().await?;
        tracing::warn!(user_id = row.user_id, "refresh token reused; its login was revoked");
        return Err(reused());
    }
    if row.revoked || row.expires_at <= Utc::now() {
        return Err(AppError::unauthorized(
            "refresh token expired or revoked; please log in again",
        ));
    }
    let user = repo::find(&mut *tx, row.user_id)
        .await?
        .ok_or_else(|| AppError::unauthorized("the user no longer exists; please log in again"))?;
    let login_expires = row
        .login_expires_at
        .unwrap_or_else(|| Utc::now() + state.config().login_max_age);
    let refresh_token = new_refresh(state, &mut *tx, (row.family_id, login_expires), user.id).await?;
    repo::forget_old_used(&mut *tx, row.family_id).await?;
    tx.commit().await?;
    Ok(TokenPair {
        token: state.jwt().issue_access(user.id, user.role, user.token_version)?,
        refresh_token,
    })
}

pub async fn current(state: &AppState, user: &CurrentUser) -> AppResult<UserView> {
    let row = repo::find(state.db(), user.id)
        .await?
        .ok_or_else(|| AppError::not_found("user"))?;
    Ok(row.into())
}

pub async fn page(state: &AppState, query: PageQuery, email: Option<String>) -> AppResult<Page<UserView>> {
    let email = validate::optional(email);
    let (rows, total) = repo::page(state.db(), email.as_deref(), query.size(), query.offset()).await?;
    Ok(Page::new(rows.into_iter().map(UserView::from).collect(), query, total))
}

pub async fn create(state: &AppState, req: CreateUserRequest) -> AppResult<i64> {
    let username = validate::required("username", req.username)?;
    validate_username(&username)?;
    let password = validate::present("password", req.password)?;
    validate_password("password", &password)?;
    not_the_username("password", &password, &username)?;
    let role = Role::parse("role", validate::present("role", req.role)?)?;
    let email = optional_email(req.email)?;
    let totals = req.totals.unwrap_or(0);
    validate::range("totals", totals, 0, MAX_TOKENS)?;
    let hash = password::hash_off_thread(password.clone()).await?;
    let new = NewUser {
        username: &username,
        password_hash: &hash,
        email: email.as_deref(),
        role: role.code(),
        totals,
        expire_dt: None,
    };
    repo::insert(state.db(), &new).await.map_err(user_conflict)
}

/// Changes a role, refusing to demote the last administrator.
async fn change_role(conn: &mut PgConnection, id: i64, role: Role) -> AppResult<()> {
    let admins = repo::lock_admins(&mut *conn).await?;
    let target = repo::find(&mut *conn, id)
        .await?
        .ok_or_else(|| AppError::not_found("user"))?;
    if target.role == Role::Admin.code() && role != Role::Admin && admins <= 1 {
        return Err(AppError::business("cannot demote the last administrator"));
    }
    repo::set_role(&mut *conn, id, role.code()).await?;
    Ok(())
}

/// The account's username, which its password may not be.
async fn username_of(state: &AppState, id: i64) -> AppResult<String> {
    let row = repo::find(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("user"))?;
    Ok(row.username)
}

pub async fn update(state: &AppState, id: i64, req: UpdateUserRequest) -> AppResult<()> {
    let role = Role::parse("role", validate::present("role", req.role)?)?;
    // Absent keeps the email; null or blank removes it (an emptied form field is a removal).
    let email = req.email.map(optional_email).transpose()?;
    let password = req.password.filter(|p| !p.is_empty());
    if let Some(p) = &password {
        validate_password("password", p)?;
        not_the_username("password", p, &username_of(state, id).await?)?;
    }
    let hash = match password {
        Some(p) => Some(password::hash_off_thread(p).await?),
        None => None,
    };
    let mut tx = state.db().begin().await?;
    change_role(&mut tx, id, role).await?;
    let email = email.as_ref().map(Option::as_deref);
    repo::update_profile(&mut *tx, id, role.code(), email, hash.as_deref())
        .await
        .map_err(user_conflict)?;
    if hash.is_some() {
        repo::revoke_all_for_user(&mut tx, id).await?;
    }
    tx.commit().await?;
    Ok(())
}

pub async fn set_role(state: &AppState, id: i64, role: Option<i64>) -> AppResult<()> {
    let role = Role::parse("role", validate::present("role", role)?)?;
    let mut tx = state.db().begin().await?;
    change_role(&mut tx, id, role).await?;
    tx.commit().await?;
    Ok(())
}

pub async fn reset_password(state: &AppState, id: i64, req: PasswordRequest) -> AppResult<()> {
    let password = validate::present("password", req.password)?;
    // The cheap rule first: a bad password is a 400 whether or not the user exists.
    validate_password("password", &password)?;
    not_the_username("password", &password, &username_of(state, id).await?)?;
    let hash = password::hash_off_thread(password.clone()).await?;
    let mut tx = state.db().begin().await?;
    if !repo::set_password(&mut *tx, id, &hash).await? {
        return Err(AppError::not_found("user"));
    }
    repo::revoke_all_for_user(&mut tx, id).await?;
    tx.commit().await?;
    Ok(())
}

pub async fn change_own_password(state: &AppState, user: &CurrentUser, req: ChangePasswordRequest) -> AppResult<()> {
    let old = validate::present("oldPassword", req.old_password.filter(|p| !p.is_empty()))?;
    let new = validate::present("newPassword", req.new_password)?;
    validate_password("newPassword", &new)?;
    not_the_username("newPassword", &new, &user.username)?;
    let row = repo::find(state.db(), user.id)
        .await?
        .ok_or_else(|| AppError::not_found("user"))?;
    // Guesses of the old password (someone holding a stolen session, who would then lock the
    // owner out) are counted like failed logins: LOGIN_MAX_FAILURES, then LOGIN_LOCK_SECS.
    let cfg = state.config();
    let guesses = [throttle::Counter {
        key: format!("pw:{}", user.id),
        limit: cfg.login_max_failures,
    }];
    throttle::reserve(state.db(), &guesses, cfg.login_lock).await?;
    if !password::verify_off_thread(old, row.password_hash.clone()).await {
        return Err(AppError::business("oldPassword is incorrect"));
    }
    throttle::release(state.db(), &guesses).await?;
    let hash = password::hash_off_thread(new).await?;
    let mut tx = state.db().begin().await?;
    // As read when the old password was checked: a reset by an administrator meanwhile (a
    // session taken over, say) must not be overwritten by a password its holder chose.
    if repo::lock_token_version(&mut tx, user.id).await? != Some(row.token_version) {
        return Err(AppError::Conflict(
            "the password was changed meanwhile; nothing was changed: log in again".into(),
        ));
    }
    repo::set_password(&mut *tx, user.id, &hash).await?;
    repo::revoke_all_for_user(&mut tx, user.id).await?;
    tx.commit().await?;
    Ok(())
}

/// The largest quota a user may hold: half the range of the columns, so that no sum the
/// service makes with it (grants, holds given back) can overflow.
pub const MAX_TOKENS: i64 = i64::MAX / 2;

/// Grants `totals` tokens valid for `days` days to the user with `email`. An existing user's
/// quota grows by `totals` and its expiry moves to now + days; an unknown email gets a new
/// regular user (username = email) with an unusable password, for an administrator to set.
pub async fn authorize_code(state: &AppState, req: AuthorizeCodeRequest) -> AppResult<()> {
    let email = validate::required("email", req.email)?;
    validate::email("email", &email)?;
    let days = validate::present("days", req.days)?;
    validate::range("days", days, 1, 3650)?;
    let totals = validate::present("totals", req.totals)?;
    validate::range("totals", totals, 1, MAX_TOKENS)?;
    let expire = Utc::now() + chrono::Duration::days(days);

    let mut tx = state.db().begin().await?;
    // Two grants to a new email take turns: the row lock below finds nothing to lock, and
    // both would insert the user (the second refused as a taken username, its grant lost).
    repo::lock_email(&mut tx, &email).await?;
    match repo::find_by_email(&mut *tx, &email).await? {
        Some(user) => {
            if !repo::grant_quota(&mut *tx, user.id, totals, expire, MAX_TOKENS).await? {
                return Err(AppError::validation(format!(
                    "totals: the user's quota would pass the largest one, {MAX_TOKENS} tokens"
                )));
            }
        }
        None => {
            let unusable = format!("!{}", uuid::Uuid::new_v4());
            let new = NewUser {
                username: &email,
                password_hash: &unusable,
                email: Some(&email),
                role: Role::User.code(),
                totals,
                expire_dt: Some(expire),
            };
            repo::insert(&mut *tx, &new).await.map_err(|e| {
                if is_unique_violation(&e, "users_username_key") {
                    AppError::business(format!(
                        "email: no user has the email {email}, and the username {email} is another user's; give that user this email or grant to another address"
                    ))
                } else {
                    user_conflict(e)
                }
            })?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Creates the first administrator from ADMIN_USERNAME / ADMIN_PASSWORD when none exists.
/// Both are held to the rules of every other account: a start with a one-letter password
/// fails, naming the variable, instead of creating an administrator anyone could guess.
pub async fn ensure_first_admin(db: &PgPool, username: Option<&str>, pass: Option<&str>) -> anyhow::Result<()> {
    let has_admin: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM users WHERE role = 1)")
        .fetch_one(db)
        .await?;
    if has_admin {
        return Ok(());
    }
    let (Some(username), Some(pass)) = (username, pass) else {
        tracing::warn!("no administrator exists and ADMIN_USERNAME/ADMIN_PASSWORD are not set");
        return Ok(());
    };
    validate_username(username).map_err(|e| anyhow::anyhow!("ADMIN_USERNAME: {}", e.told()))?;
    validate_password("ADMIN_PASSWORD", pass)
        .and_then(|()| not_the_username("ADMIN_PASSWORD", pass, username))
        .map_err(|e| anyhow::anyhow!("{}", e.told()))?;
    let hash = password::hash(pass).map_err(|e| anyhow::anyhow!("{e}"))?;
    let new = NewUser {
        username,
        password_hash: &hash,
        email: None,
        role: Role::Admin.code(),
        totals: 0,
        expire_dt: None,
    };
    if repo::insert_if_absent(db, &new).await? {
        tracing::info!(%username, "created the first administrator");
    }
    Ok(())
}
