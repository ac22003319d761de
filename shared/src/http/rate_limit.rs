//! Request rate limits per caller, counted in Postgres so that every function instance shares
//! one count: admin-API users by their JWT subject (whatever other headers come along),
//! external-API apps by `Svc-App-Id` (embed tokens count to their app). A refusal is 429 with `Retry-After`. Requests that carry no
//! valid credentials are not counted here; they are refused by authentication (and logins have
//! their own throttle).

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::{authenticate, token_from};
use crate::auth::AccessClaims;
use crate::domain::CurrentUser;
use crate::external::caller::ExternalCaller;
use crate::{AppError, AppState};

/// Who is counted, and their limit per window.
struct Subject {
    key: String,
    noun: &'static str,
    limit: u32,
    /// The claims of a verified user token, whose user row the count reads too.
    claims: Option<AccessClaims>,
}

/// Counts the request against its callers and refuses it once a caller's window is full.
pub async fn limit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let mut refusal = None;
    for subject in subjects(&mut parts, &state).await {
        if subject.limit == 0 {
            continue;
        }
        match check(&state, &subject).await {
            Ok(Some(user)) => {
                parts.extensions.insert(user);
            }
            Ok(None) => {}
            Err(refused) => {
                refusal = Some(refused);
                break;
            }
        }
    }
    let Some(refusal) = refusal else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    refusal.into_response()
}

/// The authenticated callers of the request. A valid user token always counts to its user:
/// `Svc-App-Id` is a header any client can add, so its presence must not take a user's requests
/// out of the user's window. Valid app credentials (or an embed token) count to their app, too.
/// What the extractors learn here (the app, and the user through `check`) is kept in the
/// request, so the handler does not authenticate twice.
async fn subjects(parts: &mut Parts, state: &AppState) -> Vec<Subject> {
    let limits = &state.config().rate_limits;
    let mut subjects = Vec::new();
    if let Some(claims) = token_from(parts).and_then(|t| state.jwt().verify_access(t).ok()) {
        subjects.push(Subject {
            key: format!("u:{}", claims.sub),
            noun: "user",
            limit: limits.per_user,
            claims: Some(claims),
        });
    }
    let app_headers = parts.headers.contains_key("svc-app-id") || parts.headers.contains_key("svc-token");
    if app_headers || subjects.is_empty() {
        if let Ok(caller) = ExternalCaller::from_request_parts(parts, state).await {
            // An app's nodes beat in a window of their own: counted with the app's other
            // requests (its embed tokens' too, which any visitor of the partner's page holds),
            // a flood of those starved the beats, and every node's lease ran out. Only the
            // app's own credentials count there: an embed token sent to the heartbeat route
            // (refused by it) would fill the nodes' window all the same.
            let beat = parts.uri.path().ends_with("/node/heartbeat") && caller.scope.is_none();
            let (key, noun) = match beat {
                true => (format!("n:{}", caller.app.id), "app's nodes"),
                false => (format!("a:{}", caller.app.id), "app"),
            };
            subjects.push(Subject {
                key,
                noun,
                limit: limits.per_app,
                claims: None,
            });
        }
    }
    subjects
}

/// One upsert per request: a fixed window per caller, restarted when its time is up. For a
/// user the same statement reads the identity authentication needs, which it then takes from
/// the request instead of asking again (one round trip, not two). A user's token counts only
/// while its version is the user's: a revoked one (password changed) is refused by
/// authentication without using up its user's window, which whoever holds it could otherwise
/// keep full. A failing counter lets the request through (logged): the limit protects the
/// service, it must not be the reason it fails.
async fn check(state: &AppState, subject: &Subject) -> Result<Option<CurrentUser>, AppError> {
    let window = state.config().rate_limits.window_secs;
    type Counted = (
        Option<i32>,
        Option<f64>,
        Option<i64>,
        Option<String>,
        Option<i16>,
        Option<i64>,
    );
    let counted: Result<Counted, sqlx::Error> = sqlx::query_as(
        "WITH counted AS (
             INSERT INTO rate_limit_windows AS w (key, window_start, hits)
             SELECT $1, to_timestamp((floor(extract(epoch FROM now()) / $2) * $2)::float8), 1
             WHERE $4::bigint IS NULL OR EXISTS (SELECT 1 FROM users WHERE id = $3 AND token_version = $4)
             ON CONFLICT (key) DO UPDATE SET
               hits = CASE WHEN w.window_start >= EXCLUDED.window_start THEN w.hits + 1 ELSE 1 END,
               window_start = GREATEST(w.window_start, EXCLUDED.window_start)
             RETURNING hits, extract(epoch FROM window_start + make_interval(secs => $2) - now())::float8 AS left_secs
         )
         SELECT c.hits, c.left_secs, u.id, u.username, u.role, u.token_version
         FROM (SELECT) AS one LEFT JOIN counted c ON TRUE LEFT JOIN users u ON u.id = $3",
    )
    .bind(&subject.key)
    .bind(window as i32)
    .bind(subject.claims.as_ref().map(|c| c.sub))
    .bind(subject.claims.as_ref().map(|c| c.ver))
    .fetch_one(state.db())
    .await;
    let (hits, left, id, username, role, version) = match counted {
        Ok(row) => row,
        Err(e) => {
            tracing::warn!(error = %e, key = %subject.key, "rate limit counter unavailable; request let through");
            return Ok(None);
        }
    };
    if hits.is_none_or(|hits| hits <= subject.limit as i32) {
        // A token that no longer authenticates is left to the extractor, which says why.
        let identity = id
            .zip(username)
            .zip(role)
            .zip(version)
            .map(|(((i, n), r), v)| (i, n, r, v));
        return Ok(subject
            .claims
            .as_ref()
            .and_then(|claims| authenticate(claims, identity).ok()));
    }
    let retry_after_secs = (left.unwrap_or(0.0).ceil() as u64).max(1);
    Err(AppError::RateLimited {
        message: format!(
            "too many requests: this {} may send {} requests per {} seconds; try again in {} seconds",
            subject.noun, subject.limit, window, retry_after_secs
        ),
        retry_after_secs,
    })
}
