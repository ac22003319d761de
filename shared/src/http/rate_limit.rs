//! Request rate limits per caller, counted in Postgres so that every function instance shares
//! one count: admin-API users by their JWT subject (whatever other headers come along),
//! external-API apps by `Svc-App-Id` (embed tokens count to their app, and first to a window
//! of their end user's). A refusal is 429 with `Retry-After`. Requests that carry no
//! valid credentials are not counted here; they are refused by authentication (and logins have
//! their own throttle).

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::token_from;
use crate::admission::{self, Pending, Subject};
use crate::external::caller::ExternalCaller;
use crate::AppState;

/// The routes whose handlers carry the count in their first read (`admission::Pending`), after
/// the base path: the chats, whose first token waits for every round trip before it.
const CARRIED: [&str; 3] = [
    "/agent/{agentId}/chat",
    "/openapi/v1/agent/chat",
    "/openapi/v1/agent/chat/sync",
];

fn carried(parts: &Parts, state: &AppState) -> bool {
    let base = state.base_path();
    parts
        .extensions
        .get::<MatchedPath>()
        .and_then(|matched| matched.as_str().strip_prefix(base.as_str()))
        .is_some_and(|route| CARRIED.contains(&route))
}

/// Counts the request against its callers and refuses it once a caller's window is full. On a
/// carried route a single caller's count is left to the handler, and made here only if the
/// handler answered without it.
pub async fn limit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let mut subjects = subjects(&mut parts, &state).await;
    subjects.retain(|s| s.limit != 0);
    if subjects.len() == 1 && carried(&parts, &state) {
        if let Some(subject) = subjects.pop() {
            let pending = Pending::new(subject);
            parts.extensions.insert(pending.clone());
            let response = next.run(Request::from_parts(parts, body)).await;
            pending.count_if_left(&state).await;
            return response;
        }
    }
    for subject in &subjects {
        match admission::count(&state, subject).await {
            Ok(Some(user)) => {
                parts.extensions.insert(user);
            }
            Ok(None) => {}
            Err(refused) => return refused.into_response(),
        }
    }
    next.run(Request::from_parts(parts, body)).await
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
        subjects.push(Subject::user(claims.sub, limits.per_user, Some(claims)));
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
            // An embed token is held by whoever visits the partner's page: counted only in
            // the app's window, one visitor could fill it and every request of the partner's
            // own backend was refused. Its end user has a window of a user's size first, and
            // a request refused there is not counted to the app.
            if let (Some(open_id), false) = (&caller.scope, beat) {
                subjects.push(Subject {
                    key: format!("e:{}:{open_id}", caller.app.id),
                    noun: "embed token's end user",
                    limit: limits.per_user,
                    claims: None,
                });
            }
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
