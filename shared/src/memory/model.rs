//! Wire shapes and rows of memories.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::time;
use crate::AppError;

/// The five kinds of memory an extraction may produce.
pub const MEMORY_TYPES: [&str; 5] = ["FACT", "DECISION", "PREFERENCE", "TASK_PROGRESS", "REFERENCE"];

/// A memory type named in a request, upper-cased; an unknown one names the field.
pub fn memory_type(field: &str, value: &str) -> Result<String, AppError> {
    let v = value.trim().to_uppercase();
    if MEMORY_TYPES.contains(&v.as_str()) {
        Ok(v)
    } else {
        Err(AppError::validation(format!(
            "{field} must be one of {}",
            MEMORY_TYPES.join(", ")
        )))
    }
}

/// Memory status. ACTIVE memories are recalled; ARCHIVED and SUPPRESSED only show up when
/// asked for explicitly (lists, search, detail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Active,
    Archived,
    Suppressed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "ACTIVE",
            Self::Archived => "ARCHIVED",
            Self::Suppressed => "SUPPRESSED",
        }
    }

    pub fn parse(field: &str, value: &str) -> Result<Self, AppError> {
        match value.trim().to_uppercase().as_str() {
            "ACTIVE" => Ok(Self::Active),
            "ARCHIVED" => Ok(Self::Archived),
            "SUPPRESSED" => Ok(Self::Suppressed),
            _ => Err(AppError::validation(format!(
                "{field} must be one of ACTIVE, ARCHIVED, SUPPRESSED"
            ))),
        }
    }
}

/// The three state-changing actions of the spec's memory state table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Archive,
    Suppress,
    Activate,
}

impl Transition {
    /// The state the action leads to from `from`, or why it is not allowed.
    pub fn apply(self, from: Status) -> Result<Status, AppError> {
        match (self, from) {
            (Self::Archive, Status::Active) => Ok(Status::Archived),
            (Self::Suppress, Status::Active) => Ok(Status::Suppressed),
            (Self::Activate, Status::Archived | Status::Suppressed) => Ok(Status::Active),
            (action, from) => Err(AppError::business(format!(
                "cannot {} a memory that is {}: {}",
                action.verb(),
                from.as_str(),
                match action {
                    Self::Activate => "only ARCHIVED or SUPPRESSED memories can be activated",
                    _ => "only ACTIVE memories can be archived or suppressed",
                }
            ))),
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Self::Archive => "archive",
            Self::Suppress => "suppress",
            Self::Activate => "activate",
        }
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MemoryRow {
    pub id: i64,
    pub agent_id: i64,
    pub user_id: Option<i64>,
    pub external_user_id: Option<i64>,
    pub conversation_id: Option<i64>,
    pub conversation_key: String,
    pub memory_type: String,
    pub category: String,
    pub title: String,
    pub content: String,
    pub tags: Vec<String>,
    pub relevance_score: f64,
    pub confidence_score: f64,
    pub status: String,
    pub access_count: i64,
    pub accessed_at: Option<DateTime<Utc>>,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryView {
    pub id: i64,
    pub agent_id: i64,
    /// The admin-API user the memory belongs to; null for an external user's memory.
    pub user_id: Option<i64>,
    /// The external user (app end user) the memory belongs to; null for an admin-API user's.
    pub external_user_id: Option<i64>,
    /// The client's conversation id the memory was extracted from.
    pub conversation_id: String,
    /// FACT, DECISION, PREFERENCE, TASK_PROGRESS or REFERENCE.
    pub memory_type: String,
    pub category: String,
    pub title: String,
    pub content: String,
    pub tags: Vec<String>,
    pub relevance_score: f64,
    pub confidence_score: f64,
    /// ACTIVE, ARCHIVED or SUPPRESSED.
    pub status: String,
    pub access_count: i64,
    pub accessed_at: Option<String>,
    pub create_dt: String,
    pub update_dt: String,
}

impl From<MemoryRow> for MemoryView {
    fn from(r: MemoryRow) -> Self {
        Self {
            id: r.id,
            agent_id: r.agent_id,
            user_id: r.user_id,
            external_user_id: r.external_user_id,
            conversation_id: r.conversation_key,
            memory_type: r.memory_type,
            category: r.category,
            title: r.title,
            content: r.content,
            tags: r.tags,
            relevance_score: r.relevance_score,
            confidence_score: r.confidence_score,
            status: r.status,
            access_count: r.access_count,
            accessed_at: r.accessed_at.map(time::datetime),
            create_dt: time::datetime(r.create_dt),
            update_dt: time::datetime(r.update_dt),
        }
    }
}

/// A search hit: the spec's subset of memory fields; `relevanceScore` is this query's score.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryHit {
    pub id: i64,
    pub memory_type: String,
    pub title: String,
    pub content: String,
    pub relevance_score: f64,
    pub confidence_score: f64,
    pub status: String,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ConversationMemoriesQuery {
    /// At most this many (1-100).
    pub limit: Option<i64>,
    /// Only this agent's: conversation ids are chosen per agent, so two agents' conversations
    /// may share one.
    pub agent_id: Option<i64>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AgentMemoriesQuery {
    /// Only this memory type.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub memory_type: Option<String>,
    /// At most this many (1-100, default 20).
    pub limit: Option<i64>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct RecentQuery {
    /// Created within this many days (1-3650, default 7).
    pub days: Option<i64>,
    /// At most this many (1-100, default 10).
    pub limit: Option<i64>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// Window in days (1-3650, default 30).
    pub days: Option<i64>,
}

/// Named apart in the API document: a knowledge base's search request is `SearchRequest` there,
/// and one name stood for both.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MemorySearchRequest)]
pub struct SearchRequest {
    #[schema(required = true)]
    pub query: Option<String>,
    pub agent_id: Option<i64>,
    pub types: Option<Vec<String>>,
    /// 1-100, default 10.
    pub limit: Option<i64>,
    /// Only memories created within this many days.
    pub days: Option<i64>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateRequest {
    pub title: Option<String>,
    pub content: Option<String>,
    pub memory_type: Option<String>,
    pub category: Option<String>,
    pub tags: Option<Vec<String>>,
    pub relevance_score: Option<f64>,
    pub status: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtractResult {
    /// Memories written by this extraction: created plus updated restatements.
    pub extracted_count: usize,
    pub memories: Vec<MemoryView>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub total_memories: i64,
    /// Count per memory type; every type is present.
    pub by_type: std::collections::BTreeMap<String, i64>,
    /// Ids of the most recalled memories, most recalled first (at most 5).
    pub most_used: Vec<i64>,
    /// Share (0-1) of the window's memories recalled at least once.
    pub retrieval_effectiveness: f64,
    pub date_range: DateRange,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DateRange {
    pub start: String,
    pub end: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextPreview {
    pub messages: Vec<PreviewMessage>,
    pub memories: Vec<PreviewMemory>,
    /// cl100k tokens of the agent's instruction, the recalled memories and the messages.
    pub estimated_tokens: usize,
    /// True when the history does not fit as it is: older messages fall outside the agent's
    /// short-term window or the total is over the context budget.
    pub compression_applied: bool,
    /// Why `memories` is empty when recall was refused (its model unusable, the quota used
    /// up); the chat says the same in a `warning` line.
    pub warnings: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PreviewMessage {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewMemory {
    pub id: i64,
    pub title: String,
    pub content: String,
    pub memory_type: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DebugRequest {
    #[schema(required = true)]
    pub agent_id: Option<i64>,
    #[schema(required = true)]
    pub user_id: Option<i64>,
    #[schema(required = true)]
    pub query: Option<String>,
    /// Accepted for compatibility; recall does not depend on the conversation.
    pub conversation_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_table() {
        use Status::*;
        use Transition::*;
        assert_eq!(Archive.apply(Active).unwrap(), Archived);
        assert_eq!(Suppress.apply(Active).unwrap(), Suppressed);
        assert_eq!(Activate.apply(Archived).unwrap(), Active);
        assert_eq!(Activate.apply(Suppressed).unwrap(), Active);
        for (t, s) in [
            (Archive, Archived),
            (Archive, Suppressed),
            (Suppress, Suppressed),
            (Suppress, Archived),
            (Activate, Active),
        ] {
            let e = t.apply(s).unwrap_err().to_string();
            assert!(e.contains(s.as_str()), "{e}");
        }
    }

    #[test]
    fn types_are_checked() {
        assert_eq!(memory_type("memoryType", " fact ").unwrap(), "FACT");
        assert!(memory_type("memoryType", "OPINION")
            .unwrap_err()
            .to_string()
            .starts_with("memoryType"));
    }
}
