//! Who calls the external chat: an app with its credentials (any openId), or a page holding an
//! embed token (`Svc-Auth`, one openId only).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::apps::embed_token;
use crate::http::app_credentials::AppCaller;
use crate::http::auth::token_from;
use crate::{AppError, AppState};

#[derive(Debug, Clone)]
pub struct ExternalCaller {
    pub app: AppCaller,
    /// Set for embed tokens: the only openId this caller may speak for.
    pub scope: Option<String>,
    /// Set for embed tokens issued for one agent: the only agent this caller may reach.
    pub agent_scope: Option<i64>,
}

impl ExternalCaller {
    /// The openId to act for: the request's, which an embed token must match (or may omit).
    pub fn open_id(&self, requested: Option<String>) -> Result<Option<String>, AppError> {
        let requested = crate::validate::optional(requested);
        match (&self.scope, requested) {
            (None, requested) => Ok(requested),
            (Some(scope), None) => Ok(Some(scope.clone())),
            (Some(scope), Some(r)) if *scope == r => Ok(Some(r)),
            (Some(_), Some(_)) => Err(AppError::Forbidden("this embed token speaks for another openId".into())),
        }
    }

    /// Refuses an agent outside an agent-bound embed token.
    pub fn check_agent(&self, agent_id: i64) -> Result<(), AppError> {
        match self.agent_scope {
            Some(scope) if scope != agent_id => {
                Err(AppError::Forbidden("this embed token is for another agent".into()))
            }
            _ => Ok(()),
        }
    }
}

impl FromRequestParts<AppState> for ExternalCaller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        // The rate limiter may have authenticated the request already.
        if let Some(caller) = parts.extensions.get::<ExternalCaller>() {
            return Ok(caller.clone());
        }
        let caller = Self::authenticate(parts, state).await?;
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

impl ExternalCaller {
    async fn authenticate(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let has_app_headers = parts.headers.contains_key("svc-app-id") || parts.headers.contains_key("svc-token");
        if !has_app_headers {
            if let Some(token) = token_from(parts) {
                let scope = embed_token::verify(state, token).await?;
                return Ok(Self {
                    app: AppCaller {
                        id: scope.app_row_id,
                        app_id: scope.app_id,
                    },
                    scope: Some(scope.open_id),
                    agent_scope: scope.agent_id,
                });
            }
        }
        let app = AppCaller::from_request_parts(parts, state).await?;
        Ok(Self {
            app,
            scope: None,
            agent_scope: None,
        })
    }
}
