//! Embed tokens: short-lived JWTs signed with the app's own token, scoped to the app and one
//! openId, so a partner's web page can chat without holding the app credentials.

use chrono::Utc;
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::repo;
use crate::domain::AppCaller;
use crate::{time, validate, AppError, AppResult, AppState};

pub const DEFAULT_TTL_SECONDS: i64 = 3600;
pub const MIN_TTL_SECONDS: i64 = 60;
pub const MAX_TTL_SECONDS: i64 = 86_400;
const KIND: &str = "embed";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    /// The app's string id.
    app: String,
    /// The openId the token speaks for.
    sub: String,
    /// The only agent the token may reach, when it was issued for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agt: Option<i64>,
    iat: i64,
    exp: i64,
    typ: String,
}

#[derive(Debug, Default, Deserialize, ToSchema, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct EmbedTokenRequest {
    /// Required: the end user the token speaks for.
    pub open_id: Option<String>,
    /// 60-86400, default 3600.
    pub ttl_seconds: Option<i64>,
    /// Optional: binds the token to this agent (one the app may use), as for an embed page.
    pub agent_id: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbedToken {
    pub token: String,
    /// The header to send it in: `Svc-Auth`.
    pub token_type: &'static str,
    pub expires_at: String,
    pub ttl_seconds: i64,
    pub open_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<i64>,
}

/// Who an accepted embed token speaks for.
#[derive(Debug, Clone)]
pub struct EmbedScope {
    pub app_row_id: i64,
    pub app_id: String,
    pub app_creator_id: i64,
    pub open_id: String,
    pub agent_id: Option<i64>,
}

fn refused() -> AppError {
    AppError::unauthorized("embed token invalid or expired; ask the partner for a new one")
}

pub async fn issue(state: &AppState, caller: &AppCaller, req: EmbedTokenRequest) -> AppResult<EmbedToken> {
    let open_id = crate::external::users::check_open_id(req.open_id)?;
    let ttl = req.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    validate::range("ttlSeconds", ttl, MIN_TTL_SECONDS, MAX_TTL_SECONDS)?;
    if let Some(agent_id) = req.agent_id {
        crate::external::agents::usable(state, caller, agent_id).await?;
    }
    let app = repo::find(state.db(), caller.id).await?.ok_or_else(refused)?;
    let secret = state.secrets().open(&app.token_enc)?;
    let now = Utc::now();
    let claims = Claims {
        app: app.app_id,
        sub: open_id.clone(),
        agt: req.agent_id,
        iat: now.timestamp(),
        exp: now.timestamp() + ttl,
        typ: KIND.to_owned(),
    };
    let token = encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .map_err(|e| AppError::Internal(anyhow::Error::new(e).context("signing embed token")))?;
    Ok(EmbedToken {
        token,
        token_type: "Svc-Auth",
        expires_at: time::datetime(now + chrono::Duration::seconds(ttl)),
        ttl_seconds: ttl,
        open_id,
        agent_id: req.agent_id,
    })
}

/// Checks an embed token against the current token of the app it names; a disabled app, a
/// rotated or deleted app, or an expired token are all refused.
pub async fn verify(state: &AppState, token: &str) -> AppResult<EmbedScope> {
    let mut unverified = Validation::new(Algorithm::HS256);
    unverified.insecure_disable_signature_validation();
    unverified.validate_exp = false;
    let named = decode::<Claims>(token, &DecodingKey::from_secret(&[]), &unverified).map_err(|_| refused())?;
    // Read before the signature is checked: a NUL no app id holds failed the lookup (500).
    if named.claims.app.contains('\0') {
        return Err(refused());
    }
    let app = repo::find_by_app_id(state.db(), &named.claims.app)
        .await?
        .filter(|a| a.is_enabled())
        .ok_or_else(refused)?;
    let secret = state.secrets().open(&app.token_enc)?;
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 5;
    let data =
        decode::<Claims>(token, &DecodingKey::from_secret(secret.as_bytes()), &validation).map_err(|_| refused())?;
    // The app's own holder can sign what it likes: an openId this service would not issue
    // (past 128 characters, holding a NUL) is refused here, not by the database later.
    let sub = &data.claims.sub;
    let issuable = !sub.is_empty() && sub.chars().count() <= 128 && !sub.contains('\0');
    // Nor a token living longer than one this service issues, or issued ahead of time (by more than
    // a minute, as a partner's clock may run fast): the holder could otherwise sign tokens that
    // outlast everything but a rotation of the app's.
    let (iat, exp) = (data.claims.iat, data.claims.exp);
    let lifetime = iat <= Utc::now().timestamp() + 60 && exp.saturating_sub(iat) <= MAX_TTL_SECONDS;
    if data.claims.typ != KIND || data.claims.app != app.app_id || !issuable || !lifetime {
        return Err(refused());
    }
    Ok(EmbedScope {
        app_row_id: app.id,
        app_id: app.app_id,
        app_creator_id: app.creator_id,
        open_id: data.claims.sub,
        agent_id: data.claims.agt,
    })
}
