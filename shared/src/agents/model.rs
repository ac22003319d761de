//! Wire shapes and rows of the agents module.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::time;

/// An agent row joined with its creator's name, its chat model's key and whether the caller
/// subscribed to it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AgentRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub avatar: String,
    pub instruction: String,
    pub greeting: String,
    pub preset_questions: Vec<String>,
    pub chat_model_id: Option<i64>,
    pub chat_model: Option<String>,
    pub mcp_enabled: bool,
    pub mcp_server_ids: Vec<i64>,
    pub skill_enabled: bool,
    pub skill_ids: Vec<i64>,
    pub web_search_enabled: bool,
    pub rag_enabled: bool,
    pub rag_id: Option<i64>,
    pub memory_enabled: bool,
    pub memory_config_id: Option<i64>,
    pub short_term_memory_size: i32,
    pub is_featured: bool,
    pub app_id: Option<String>,
    pub status: i16,
    pub view_count: i64,
    pub creator_id: i64,
    pub creator: String,
    pub subscribed: bool,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
}

impl AgentRow {
    pub fn is_enabled(&self) -> bool {
        self.status == 1
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    pub id: i64,
    pub name: String,
    pub description: String,
    /// An emoji or an image URL.
    pub avatar: String,
    pub creator: String,
    pub creator_id: i64,
    pub view_count: i64,
    pub is_featured: bool,
    /// The system prompt.
    pub instruction: String,
    pub greeting: String,
    pub preset_questions: Vec<String>,
    pub chat_model_id: Option<i64>,
    /// The chat model's key.
    pub chat_model: Option<String>,
    pub mcp_enabled: bool,
    pub mcp_server_ids: Vec<i64>,
    pub skill_enabled: bool,
    pub skill_ids: Vec<i64>,
    pub web_search_enabled: bool,
    pub rag_enabled: bool,
    pub rag_id: Option<i64>,
    pub memory_enabled: bool,
    pub memory_config_id: Option<i64>,
    pub short_term_memory_size: i32,
    /// The app whose client nodes run this agent's model calls.
    pub app_id: Option<String>,
    /// 1 enabled, 0 disabled.
    pub status: i16,
    pub subscribed: bool,
    /// In detail only: the bound MCP servers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<crate::mcp::McpServerBrief>>,
    /// In detail only: the bound skills.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<crate::skills::SkillBrief>>,
    pub create_dt: String,
    pub update_dt: String,
}

impl AgentView {
    /// The agent as `viewer` sees it. Its app is shown to those who manage it: only
    /// administrators bind agents to apps, and a regular user naming an app gets the
    /// unknown-app answer, so app ids are not learnt from the agents others may chat with.
    pub fn seen_by(r: AgentRow, viewer: &crate::domain::CurrentUser) -> Self {
        let app_id = r.app_id.filter(|_| viewer.can_manage(r.creator_id));
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            avatar: r.avatar,
            creator: r.creator,
            creator_id: r.creator_id,
            view_count: r.view_count,
            is_featured: r.is_featured,
            instruction: r.instruction,
            greeting: r.greeting,
            preset_questions: r.preset_questions,
            chat_model_id: r.chat_model_id,
            chat_model: r.chat_model,
            mcp_enabled: r.mcp_enabled,
            mcp_server_ids: r.mcp_server_ids,
            skill_enabled: r.skill_enabled,
            skill_ids: r.skill_ids,
            web_search_enabled: r.web_search_enabled,
            rag_enabled: r.rag_enabled,
            rag_id: r.rag_id,
            memory_enabled: r.memory_enabled,
            memory_config_id: r.memory_config_id,
            short_term_memory_size: r.short_term_memory_size,
            app_id,
            status: r.status,
            subscribed: r.subscribed,
            mcp_servers: None,
            skills: None,
            create_dt: time::datetime(r.create_dt),
            update_dt: time::datetime(r.update_dt),
        }
    }
}

/// A market entry.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MarketAgent {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub avatar: String,
    pub creator: String,
    pub view_count: i64,
    pub is_featured: bool,
    pub subscribed: bool,
}

impl From<AgentRow> for MarketAgent {
    fn from(r: AgentRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            avatar: r.avatar,
            creator: r.creator,
            view_count: r.view_count,
            is_featured: r.is_featured,
            subscribed: r.subscribed,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentSort {
    /// Newest first.
    #[default]
    Latest,
    /// Most viewed first.
    Popular,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AgentFilter {
    /// Matches name or description.
    pub keyword: Option<String>,
    pub featured: Option<bool>,
    /// `latest` (default) or `popular`.
    #[param(inline)]
    pub sort: Option<AgentSort>,
}

/// Fields of an agent; on update absent fields are kept, the nullable references
/// (`chatModelId`, `ragId`, `memoryConfigId`, `appId`) are cleared by an explicit `null`, and
/// so are the lists (`presetQuestions`, `mcpServerIds`, `skillIds`), as by `[]`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentFields {
    pub name: Option<String>,
    pub description: Option<String>,
    pub instruction: Option<String>,
    pub greeting: Option<String>,
    #[serde(default, deserialize_with = "crate::json::null_as_empty")]
    pub preset_questions: Option<Vec<String>>,
    pub avatar: Option<String>,
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<i64>)]
    pub chat_model_id: Option<Option<i64>>,
    pub mcp_enabled: Option<bool>,
    #[serde(default, deserialize_with = "crate::json::null_as_empty")]
    pub mcp_server_ids: Option<Vec<i64>>,
    pub skill_enabled: Option<bool>,
    #[serde(default, deserialize_with = "crate::json::null_as_empty")]
    pub skill_ids: Option<Vec<i64>>,
    pub web_search_enabled: Option<bool>,
    pub rag_enabled: Option<bool>,
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<i64>)]
    pub rag_id: Option<Option<i64>>,
    pub memory_enabled: Option<bool>,
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<i64>)]
    pub memory_config_id: Option<Option<i64>>,
    /// History window in messages, 0 to 200 (default 20).
    pub short_term_memory_size: Option<i32>,
    /// Administrators only.
    pub is_featured: Option<bool>,
    /// An existing app's appId.
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<String>)]
    pub app_id: Option<Option<String>>,
    /// 1 enabled, 0 disabled.
    pub status: Option<i16>,
}

/// A selectable chat model.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatModelOption {
    pub id: i64,
    /// The model key.
    pub value: String,
    /// The display name.
    pub label: String,
    pub capabilities: Vec<String>,
}
