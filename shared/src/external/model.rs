//! Wire shapes and rows of the external API.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::agents::chat::attachments::AttachmentIn;
use crate::agents::chat::TokenUsage;
use crate::time;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExternalUserRow {
    pub id: i64,
    pub open_id: String,
    pub nickname: String,
    pub avatar: String,
    pub extra: Value,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalUserView {
    /// The partner's own id for the user; the service's row id is not shown: it counts every
    /// app's users, so a partner would read the others' sign-ups from its gaps.
    pub open_id: String,
    /// null when never set (or cleared with `""`).
    pub nickname: Option<String>,
    /// null when never set (or cleared with `""`).
    pub avatar: Option<String>,
    /// Whatever the partner stored with the user (a JSON object).
    pub extra: Value,
    pub create_dt: String,
    pub update_dt: String,
}

impl From<ExternalUserRow> for ExternalUserView {
    fn from(r: ExternalUserRow) -> Self {
        Self {
            open_id: r.open_id,
            nickname: Some(r.nickname).filter(|n| !n.is_empty()),
            avatar: Some(r.avatar).filter(|a| !a.is_empty()),
            extra: r.extra,
            create_dt: time::datetime(r.create_dt),
            update_dt: time::datetime(r.update_dt),
        }
    }
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterRequest {
    /// Required, 1-128 characters: the partner's id of its end user.
    pub open_id: Option<String>,
    /// At most 100 characters; kept when absent.
    pub nickname: Option<String>,
    /// At most 1000 characters (an image URL); kept when absent.
    pub avatar: Option<String>,
    /// A JSON object; kept when absent.
    pub extra: Option<Value>,
}

/// `openId` alone, as a query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct OpenIdQuery {
    pub open_id: Option<String>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AgentQuery {
    /// Required.
    pub agent_id: Option<i64>,
    /// Optional: shows whether this user subscribed.
    pub open_id: Option<String>,
}

/// An agent as partners see it: no system prompt, no tool configuration, and not its creator,
/// whose login name (an email address, for accounts made by an emailed code) anyone holding a
/// partner page's embed token could read.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExternalAgentRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub avatar: String,
    pub greeting: String,
    pub preset_questions: Vec<String>,
    pub view_count: i64,
    pub is_featured: bool,
    pub app_id: Option<String>,
    pub create_dt: DateTime<Utc>,
    pub subscribed: bool,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalAgent {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub avatar: String,
    pub greeting: String,
    pub preset_questions: Vec<String>,
    pub view_count: i64,
    pub is_featured: bool,
    /// The app this agent runs on, or null for every app.
    pub app_id: Option<String>,
    /// Whether the given openId subscribed (false without one).
    pub subscribed: bool,
    pub create_dt: String,
}

impl From<ExternalAgentRow> for ExternalAgent {
    fn from(r: ExternalAgentRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            avatar: r.avatar,
            greeting: r.greeting,
            preset_questions: r.preset_questions,
            view_count: r.view_count,
            is_featured: r.is_featured,
            app_id: r.app_id,
            subscribed: r.subscribed,
            create_dt: time::datetime(r.create_dt),
        }
    }
}

/// `{agentId, openId}`, as JSON (POST) or query (DELETE).
#[derive(Debug, Default, Deserialize, ToSchema, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct SubscriptionRequest {
    pub agent_id: Option<i64>,
    pub open_id: Option<String>,
}

/// Selects the conversations of one user with one agent (and optionally one of them).
#[derive(Debug, Default, Deserialize, ToSchema, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ConversationQuery {
    pub agent_id: Option<i64>,
    pub open_id: Option<String>,
    /// List: ignored. Delete: one conversation; absent clears all of the agent. Messages: required.
    pub conversation_id: Option<String>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewConversation {
    /// Required.
    pub agent_id: Option<i64>,
    /// Required.
    pub open_id: Option<String>,
    /// Chosen by the caller, 1-128 characters; a UUID when absent.
    pub conversation_id: Option<String>,
    /// At most 200 characters.
    pub title: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConversationCreated {
    pub conversation_id: String,
    pub title: String,
    /// False when the user already had a conversation with this id (nothing changed but the title).
    pub created: bool,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    pub deleted: u64,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UploadRequest {
    #[schema(required = true)]
    pub open_id: Option<String>,
    #[schema(required = true)]
    pub original_name: Option<String>,
    /// The size in bytes of the decoded content; must match it.
    #[schema(required = true)]
    pub file_size: Option<i64>,
    /// Base64 of the image (JPG, PNG or WEBP, at most 10 MB); a `data:` URI prefix is accepted.
    #[schema(required = true)]
    pub content: Option<String>,
    /// Default ATTACHMENT.
    pub biz_type: Option<String>,
    pub biz_id: Option<i64>,
}

/// Asks for a presigned PUT of a chat image, for one a JSON body cannot carry.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageUploadUrlRequest {
    /// Size in bytes of the image that will be sent (at most 10 MB).
    pub file_size: Option<i64>,
    /// image/jpeg, image/png or image/webp: sent as the PUT's Content-Type.
    pub content_type: Option<String>,
}

/// Registers an image sent to a presigned URL as the external user's.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompleteImageUploadRequest {
    pub open_id: Option<String>,
    /// The `storageKey` of the upload URL's answer.
    pub storage_key: Option<String>,
    pub original_name: Option<String>,
    /// Default ATTACHMENT.
    pub biz_type: Option<String>,
    pub biz_id: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UploadedImage {
    /// Goes into attachments[].resourceId.
    pub resource_id: i64,
    pub original_name: String,
    pub file_size: i64,
    pub mime_type: String,
    pub create_dt: String,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalChatRequest {
    #[schema(required = true)]
    pub agent_id: Option<i64>,
    #[schema(required = true)]
    pub open_id: Option<String>,
    #[schema(required = true)]
    pub conversation_id: Option<String>,
    #[schema(required = true)]
    pub content: Option<String>,
    /// Images only: `[{type: IMAGE, resourceId}]` uploaded by this openId.
    pub attachments: Option<Vec<AttachmentIn>>,
    pub disabled_mcp_server_ids: Option<Vec<i64>>,
    pub disabled_skill_ids: Option<Vec<i64>>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncAnswer {
    pub conversation_id: String,
    pub content: String,
    pub thinking: String,
    pub duration_ms: u64,
    pub usage: TokenUsage,
    /// Context the answer went without (the stream's `warning` lines): the knowledge base could
    /// not be searched, or memories could not be recalled.
    pub warnings: Vec<String>,
}
