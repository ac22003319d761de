//! Who calls the external chat: an app with its credentials (any openId), or a page holding an
//! embed token (`Svc-Auth`, one openId only). The extractor is in `crate::http::external_caller`.

use crate::domain::AppCaller;
use crate::AppError;

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
