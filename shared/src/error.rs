//! The one error type of the service and how it becomes an HTTP response.

use http::StatusCode;

pub type AppResult<T> = Result<T, AppError>;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Input that breaks a rule; the message names the field.
    #[error("{0}")]
    Validation(String),
    /// A business rule refused the request (duplicate name, wrong old password ...).
    #[error("{0}")]
    Business(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// The path exists, the method does not.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// Someone else changed the thing first (optimistic concurrency); reload and retry.
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// A `Range` that names no byte of the file; its size goes in `Content-Range`.
    #[error("the requested range is not within the file's {size} bytes")]
    RangeNotSatisfiable { size: u64 },
    #[error("{message}")]
    RateLimited { message: String, retry_after_secs: u64 },
    /// A backing service (database, object storage) cannot be reached; the cause is logged.
    #[error("{message}")]
    Unavailable { message: String, cause: anyhow::Error },
    /// Anything the client cannot fix; logged with its cause, shown as a generic message.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// What an error response carried, kept as a response extension so a module with the other
/// envelope (`{status, message, data}`) can render the same failure its own way.
#[derive(Clone, Debug)]
pub struct ErrorInfo {
    pub code: i64,
    pub message: String,
}

impl AppError {
    pub fn validation(msg: impl Into<String>) -> Self {
        Self::Validation(msg.into())
    }
    pub fn business(msg: impl Into<String>) -> Self {
        Self::Business(msg.into())
    }
    pub fn not_found(what: &str) -> Self {
        Self::NotFound(format!("{what} not found"))
    }
    pub fn unauthorized(msg: impl Into<String>) -> Self {
        Self::Unauthorized(msg.into())
    }
    /// An edit made from a row that changed since it was read: written, it would undo the
    /// other change (edits write the whole row they read).
    pub fn changed_meanwhile(what: &str) -> Self {
        Self::Conflict(format!(
            "the {what} was changed by someone else meanwhile; reload it and apply your change again"
        ))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Validation(_) | Self::Business(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The envelope code: 0 for rule failures, otherwise the HTTP status.
    pub fn code(&self) -> i64 {
        match self {
            Self::Validation(_) | Self::Business(_) => 0,
            other => i64::from(other.status().as_u16()),
        }
    }

    /// What the client is told: the message, except for internal failures, whose cause is
    /// only logged.
    pub fn public_message(&self) -> String {
        match self {
            Self::Internal(_) => "internal server error; the failure was logged".to_owned(),
            other => other.to_string(),
        }
    }

    /// Logs the cause of a failure the client is not told about (internal, a backing service).
    pub fn log(&self) {
        self.log_answered(None);
    }

    /// `log`, with how long the request took when it was answered with this failure: the
    /// request's one line about it (`http::middleware`).
    pub fn log_answered(&self, latency_ms: Option<u64>) {
        let status = self.status().as_u16();
        match self {
            Self::Internal(cause) => tracing::error!(status, latency_ms, error = ?cause, "request failed"),
            Self::Unavailable { cause, .. } => tracing::warn!(
                status,
                latency_ms,
                error = ?cause,
                "request failed: a backing service is unavailable"
            ),
            _ => {}
        }
    }

    /// A failure of the service or what it depends on, not of the request: passed on as it
    /// is (logged, shown as itself), never folded into another message or taken for a final
    /// answer about the input.
    pub fn is_server_side(&self) -> bool {
        matches!(self, Self::Internal(_) | Self::Unavailable { .. })
    }

    /// Whether the same work, done again, may succeed: the service failing, or a concurrent
    /// change that got in its way (a deadlock, a row removed meanwhile). What queued work
    /// hands back to its queue.
    pub fn may_pass(&self) -> bool {
        self.is_server_side() || matches!(self, Self::Conflict(_))
    }

    /// `log`, then `public_message`: for a failure told inside a stream whose status was sent.
    pub fn told(&self) -> String {
        self.log();
        self.public_message()
    }

    /// A refusal about the input, worded by `say` from what this error tells; a failure of the
    /// service is passed on as it is (`is_server_side`).
    pub fn refusal(self, say: impl FnOnce(String) -> String) -> Self {
        match self.is_server_side() {
            true => self,
            false => Self::Business(say(self.told())),
        }
    }
}

impl AppError {
    pub fn unavailable(what: &str, cause: anyhow::Error) -> Self {
        Self::Unavailable {
            message: format!("{what} is unavailable right now; nothing was changed, try again shortly"),
            cause,
        }
    }
}

/// The service's own database failed somewhere in `e`'s chain: not the caller's concern, nor
/// a store's or a model's, whatever the outer layers say.
pub fn database_failed(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| cause.is::<sqlx::Error>())
}

/// What a partner's app is told when its credentials are not (or no longer) good.
pub const APP_REFUSED: &str = "app credentials invalid or app disabled";

/// The foreign keys from a partner app's rows to the app: an app deleted while its credentials
/// were still cached (`auth::verified_apps`, 5 s) fails them, and is refused as its callers are.
const GONE_APP_KEYS: &[&str] = &["external_users_app_id_fkey", "client_nodes_app_id_fkey"];

/// The foreign keys from rows stored for an end user of a partner to that user: the user went
/// meanwhile, with its app or as a new user whose refused first request removed it again. A
/// retry finds the app refused, or registers the user anew.
const GONE_END_USER_KEYS: &[&str] = &[
    "external_subscriptions_external_user_id_fkey",
    "conversations_external_user_id_fkey",
    "external_resources_external_user_id_fkey",
];

/// The foreign keys from what a chat or a subscription stores to its agent: the agent was
/// deleted between the request's check and its insert.
const GONE_AGENT_KEYS: &[&str] = &[
    "conversations_agent_id_fkey",
    "agent_subscriptions_agent_id_fkey",
    "external_subscriptions_agent_id_fkey",
    "memories_agent_id_fkey",
];

/// The foreign keys from what an extraction stores to its conversation: the conversation was
/// deleted while its memories were being extracted (a model call of seconds).
const GONE_CONVERSATION_KEYS: &[&str] = &[
    "memories_conversation_id_fkey",
    "memory_extractions_conversation_id_fkey",
];

/// The foreign keys from what names a model config to it: the config was deleted between the
/// request's check of the models it names and its write (an edit read before the delete writes
/// the id back).
const GONE_MODEL_KEYS: &[&str] = &[
    "agents_chat_model_id_fkey",
    "knowledge_bases_embedding_model_id_fkey",
    "knowledge_bases_rerank_model_id_fkey",
    "memory_configs_embedding_model_id_fkey",
    "memory_configs_rerank_model_id_fkey",
    "memory_configs_extraction_model_id_fkey",
];

/// The foreign keys from what is stored into a knowledge base to the base: it was deleted
/// while the request (a URL being fetched, an upload being stored) ran, and answers as if it
/// had been gone when the request came.
const GONE_BASE_KEYS: &[&str] = &[
    "documents_rag_id_fkey",
    "upload_previews_rag_id_fkey",
    "chunks_rag_id_fkey",
    "document_images_rag_id_fkey",
    "agents_rag_id_fkey",
];

impl From<sqlx::Error> for AppError {
    fn from(err: sqlx::Error) -> Self {
        if GONE_BASE_KEYS.iter().any(|key| is_foreign_key_violation(&err, key)) {
            return Self::not_found("knowledge base");
        }
        // A row read back within the request (an insert-or-read's) was removed meanwhile, each
        // time it was tried: a race with another request, not a failure of the service.
        if matches!(err, sqlx::Error::RowNotFound) {
            tracing::warn!("a row this request wrote or found was removed by another meanwhile");
            return Self::Conflict("a record this request needed was removed meanwhile; try again".into());
        }
        if GONE_MODEL_KEYS.iter().any(|key| is_foreign_key_violation(&err, key)) {
            return Self::Conflict(
                "a model it names was deleted while this request ran; nothing was changed: reload and try again".into(),
            );
        }
        if GONE_APP_KEYS.iter().any(|key| is_foreign_key_violation(&err, key)) {
            return Self::unauthorized(APP_REFUSED);
        }
        if GONE_AGENT_KEYS.iter().any(|key| is_foreign_key_violation(&err, key)) {
            return Self::Conflict("the agent was deleted while this request ran".into());
        }
        if GONE_CONVERSATION_KEYS
            .iter()
            .any(|key| is_foreign_key_violation(&err, key))
        {
            return Self::Conflict("the conversation was deleted while this request ran".into());
        }
        if GONE_END_USER_KEYS.iter().any(|key| is_foreign_key_violation(&err, key)) {
            return Self::Conflict("the end user was removed while this request ran; try again".into());
        }
        // Lost or refused connections (a restart, a failover) are worth a retry; the rest is a bug.
        let unreachable = match &err {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
                true
            }
            // Postgres itself ending the connection: a shutdown or restart terminating it
            // (57P01-57P03, "terminating connection due to administrator command"), or a
            // connection exception (class 08).
            sqlx::Error::Database(db) => db
                .code()
                .is_some_and(|c| c.starts_with("08") || matches!(c.as_ref(), "57P01" | "57P02" | "57P03")),
            _ => false,
        };
        // Two transactions that took the same rows in opposite orders (a binding holding the
        // models it names while an administrator switches a default, say): Postgres ends one
        // of them, and nothing of it was written. Logged, as the chain shows which statement.
        let deadlocked = matches!(&err, sqlx::Error::Database(db)
            if db.code().is_some_and(|c| matches!(c.as_ref(), "40P01" | "40001")));
        if deadlocked {
            tracing::warn!(error = %err, "a transaction was ended by the database to break a deadlock");
            return Self::Conflict(
                "a concurrent change to the same records got in the way and nothing was changed; try again".into(),
            );
        }
        let cause = anyhow::Error::new(err).context("database");
        match unreachable {
            true => Self::unavailable("the database", cause),
            false => Self::Internal(cause),
        }
    }
}

/// True when a database error is the violation of the named foreign key: a row named by
/// another was deleted, or one naming it was written, between a check and the statement.
pub fn is_foreign_key_violation(err: &sqlx::Error, constraint: &str) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if db.is_foreign_key_violation() && db.constraint() == Some(constraint))
}

/// True when a database error is the violation of the named unique constraint.
pub fn is_unique_violation(err: &sqlx::Error, constraint: &str) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if db.is_unique_violation() && db.constraint() == Some(constraint))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_failing_or_a_concurrent_change_may_pass_a_refusal_may_not() {
        assert!(AppError::from(sqlx::Error::RowNotFound).may_pass());
        assert!(AppError::from(sqlx::Error::PoolTimedOut).may_pass());
        assert!(AppError::Internal(anyhow::anyhow!("bug")).may_pass());
        for refused in [
            AppError::validation("name is required"),
            AppError::business("the model is disabled"),
            AppError::Forbidden("quota used up".into()),
            AppError::not_found("model config"),
        ] {
            assert!(!refused.may_pass(), "{refused}");
        }
    }
}
