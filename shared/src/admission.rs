//! A request's admission: its count against its caller's rate limit (a fixed window per caller
//! in `rate_limit_windows`, shared by every instance) and, for a user, the identity that
//! authentication needs, read by the same statement.
//!
//! The limiter (`crate::http::rate_limit`) runs that statement before the handler. On a route
//! whose handler reads one row before anything else (a chat reads its agent), the count can
//! instead be [`Pending`]: the handler's read carries it, so the request costs one round trip
//! where it cost two. On a chat that is one wait less before the first token, and one statement
//! less for the database per chat.

use std::sync::{Arc, Mutex};

use sqlx::postgres::PgRow;
use sqlx::{FromRow, Postgres, QueryBuilder, Row};

use crate::auth::AccessClaims;
use crate::domain::CurrentUser;
use crate::users::identity::authenticate;
use crate::users::repo::Identity;
use crate::{AppError, AppResult, AppState};

/// Who is counted, and their limit per window.
pub struct Subject {
    pub key: String,
    pub noun: &'static str,
    pub limit: u32,
    /// The claims of a verified user token, whose user row the count reads too.
    pub claims: Option<AccessClaims>,
}

impl Subject {
    /// A user, counted in the user's window; `claims` when the request holds their access
    /// token.
    pub fn user(id: i64, limit: u32, claims: Option<AccessClaims>) -> Self {
        Self {
            key: format!("u:{id}"),
            noun: "user",
            limit,
            claims,
        }
    }
}

/// What the count answers: the caller's hits and the seconds left in its window (none when
/// the request was not counted: its token no longer authenticates), and a user's identity.
#[derive(FromRow)]
struct Counted {
    rl_hits: Option<i32>,
    rl_left: Option<f64>,
    rl_user_id: Option<i64>,
    rl_username: Option<String>,
    rl_role: Option<i16>,
    rl_version: Option<i64>,
}

impl Counted {
    fn identity(&self) -> Option<Identity> {
        Some((
            self.rl_user_id?,
            self.rl_username.clone()?,
            self.rl_role?,
            self.rl_version?,
        ))
    }
}

/// Pushes the `counted` CTE that counts the request, after `WITH ` and any CTE it names in
/// `after`. A user's token counts only while its version is the user's: a revoked one
/// (password changed) is refused by authentication without using up its user's window, which
/// whoever holds it could otherwise keep full.
///
/// The caller's counter row stays locked from its update to the statement's commit, and every
/// concurrent request of that caller (all of a partner app's users) queues on it. So a read
/// that the statement carries is made first: the insert reads `after` (a materialized CTE)
/// before it takes the row, which leaves only the statement's last moments under the lock.
fn push_count(qb: &mut QueryBuilder<'_, Postgres>, subject: &Subject, window: i32, after: Option<&'static str>) {
    let user = subject.claims.as_ref().map(|c| c.sub);
    let version = subject.claims.as_ref().map(|c| c.ver);
    qb.push("counted AS (INSERT INTO rate_limit_windows AS w (key, window_start, hits) SELECT ")
        .push_bind(subject.key.clone())
        .push(", to_timestamp((floor(extract(epoch FROM now()) / ")
        .push_bind(window)
        .push(") * ")
        .push_bind(window)
        .push(")::float8), 1");
    if let Some(after) = after {
        qb.push(" FROM (SELECT count(*) FROM ")
            .push(after)
            .push(") AS read_first");
    }
    qb.push(" WHERE ")
        .push_bind(version)
        .push("::bigint IS NULL OR EXISTS (SELECT 1 FROM users WHERE id = ")
        .push_bind(user)
        .push(" AND token_version = ")
        .push_bind(version)
        .push(
            ") ON CONFLICT (key) DO UPDATE SET
               hits = CASE WHEN w.window_start >= EXCLUDED.window_start THEN w.hits + 1 ELSE 1 END,
               window_start = GREATEST(w.window_start, EXCLUDED.window_start)
             RETURNING hits, extract(epoch FROM window_start + make_interval(secs => ",
        )
        .push_bind(window)
        .push(") - now())::float8 AS left_secs) ");
}

/// Pushes the SELECT of [`Counted`]'s columns, after [`push_count`].
fn push_counted(qb: &mut QueryBuilder<'_, Postgres>, subject: &Subject) {
    qb.push(
        "SELECT c.hits AS rl_hits, c.left_secs AS rl_left, u.id AS rl_user_id, u.username AS rl_username,
           u.role AS rl_role, u.token_version AS rl_version
         FROM (SELECT) AS one LEFT JOIN counted c ON TRUE LEFT JOIN users u ON u.id = ",
    )
    .push_bind(subject.claims.as_ref().map(|c| c.sub));
}

/// The limiter's answer to a count: a refusal once the caller's window is full; else, for a
/// user, whether the token still authenticates (None for an app).
fn verdict(state: &AppState, subject: &Subject, counted: &Counted) -> AppResult<Option<AppResult<CurrentUser>>> {
    if counted
        .rl_hits
        .is_none_or(|hits| i64::from(hits) <= i64::from(subject.limit))
    {
        let identity = counted.identity();
        return Ok(subject.claims.as_ref().map(|claims| authenticate(claims, identity)));
    }
    let window = state.config().rate_limits.window_secs;
    let retry_after_secs = (counted.rl_left.unwrap_or(0.0).ceil() as u64).max(1);
    Err(AppError::RateLimited {
        message: format!(
            "too many requests: this {} may send {} requests per {} seconds; try again in {} seconds",
            subject.noun, subject.limit, window, retry_after_secs
        ),
        retry_after_secs,
    })
}

fn window(state: &AppState) -> i32 {
    i32::try_from(state.config().rate_limits.window_secs).unwrap_or(i32::MAX)
}

/// Counts the request by itself; returns the user of a token that still authenticates (one
/// that does not is left to the extractor, which says why). A failing counter lets the request
/// through (logged): the limit protects the service, it must not be the reason it fails.
pub async fn count(state: &AppState, subject: &Subject) -> AppResult<Option<CurrentUser>> {
    let mut qb = QueryBuilder::new("WITH ");
    push_count(&mut qb, subject, window(state), None);
    push_counted(&mut qb, subject);
    match qb.build_query_as::<Counted>().fetch_one(state.db()).await {
        Ok(counted) => Ok(verdict(state, subject, &counted)?.and_then(Result::ok)),
        Err(e) => {
            tracing::warn!(error = %e, key = %subject.key, "rate limit counter unavailable; request let through");
            Ok(None)
        }
    }
}

/// A request's count left to its handler's first read (see the module's comment). Whoever
/// takes it counts the request; the limiter counts a request whose handler answered without
/// taking it (refused by a check before its first read).
#[derive(Clone)]
pub struct Pending(Arc<Mutex<Option<Subject>>>);

impl Pending {
    pub fn new(subject: Subject) -> Self {
        Self(Arc::new(Mutex::new(Some(subject))))
    }

    fn take(&self) -> Option<Subject> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }

    /// The user whose token is counted, if the caller is a user.
    pub fn user_id(&self) -> Option<i64> {
        let slot = self.0.lock().ok()?;
        slot.as_ref()?.claims.as_ref().map(|c| c.sub)
    }

    /// Counts the request, if nobody did.
    pub async fn count_if_left(&self, state: &AppState) {
        if let Some(subject) = self.take() {
            // Only the count matters here: the answer is already given.
            let _ = count(state, &subject).await;
        }
    }

    /// Runs the SELECT that `select` pushes (at most one row) in the statement that counts the
    /// request, and judges the count first: a full window is refused (429), a user's token that
    /// no longer authenticates too (401), before the row is looked at. Returns the user of the
    /// token (None for an app) and the row.
    pub async fn count_with<T>(
        &self,
        state: &AppState,
        select: impl FnOnce(&mut QueryBuilder<'_, Postgres>),
    ) -> AppResult<(Option<CurrentUser>, Option<T>)>
    where
        T: for<'r> FromRow<'r, PgRow>,
    {
        let subject = self
            .take()
            .ok_or_else(|| AppError::Internal(anyhow::anyhow!("a request's rate-limit count was taken twice")))?;
        let mut qb = QueryBuilder::new("WITH item AS MATERIALIZED (");
        select(&mut qb);
        qb.push("), ");
        push_count(&mut qb, &subject, window(state), Some("item"));
        qb.push("SELECT rl.*, i.* FROM (");
        push_counted(&mut qb, &subject);
        qb.push(") rl LEFT JOIN (SELECT TRUE AS rl_found, x.* FROM item x) i ON TRUE");
        let row = qb.build().fetch_one(state.db()).await?;
        let user = verdict(state, &subject, &Counted::from_row(&row)?)?.transpose()?;
        if let Some(user) = &user {
            tracing::Span::current().record("user.id", user.id);
        }
        let found = row.try_get::<Option<bool>, _>("rl_found")?.unwrap_or(false);
        let item = if found { Some(T::from_row(&row)?) } else { None };
        Ok((user, item))
    }
}

/// An admin-API user as a chat takes them: authenticated already, or to be authenticated by the
/// count that the chat's first read carries.
pub enum UserAdmission {
    Known(CurrentUser),
    Pending(Pending),
}
