//! Wire shapes and rows of the skill module.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::time;

/// A skill as listed for selection and shown in an agent's detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct SkillBrief {
    pub id: i64,
    pub name: String,
    pub description: String,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SkillRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub file_name: String,
    pub file_size: i64,
    pub storage_key: String,
    pub version: i64,
    pub creator_id: i64,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
}

/// A skill record. `version` grows with every change of the package; send it back with an
/// edit to make sure you are changing what you read.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Skill {
    pub id: i64,
    pub name: String,
    pub description: String,
    /// Name of the uploaded zip; empty for skills created online.
    pub file_name: String,
    /// Size of the stored zip in bytes.
    pub file_size: i64,
    pub version: i64,
    pub creator_id: i64,
    /// `YYYY-MM-DDTHH:mm:ss`
    pub create_dt: String,
    pub update_dt: String,
}

impl From<SkillRow> for Skill {
    fn from(r: SkillRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            file_name: r.file_name,
            file_size: r.file_size,
            version: r.version,
            creator_id: r.creator_id,
            create_dt: time::iso_local(r.create_dt),
            update_dt: time::iso_local(r.update_dt),
        }
    }
}

/// `keyword` matches name or description.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SkillFilter {
    pub keyword: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSkill {
    #[schema(required = true)]
    pub name: Option<String>,
    pub description: Option<String>,
}

/// Only the fields sent change; they are written into `SKILL.md`'s front matter too.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateSkill {
    pub name: Option<String>,
    pub description: Option<String>,
    /// The version you read; a different current version is a 409 conflict.
    pub version: Option<i64>,
}

/// `path` query parameter of the file endpoints.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PathQuery {
    /// Relative path inside the package, e.g. `scripts/run.py`.
    pub path: Option<String>,
    /// For deletes: the version you read (optional).
    pub version: Option<i64>,
}

/// `version` query parameter of a package's replacement.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VersionQuery {
    /// The version you read (optional): any change since then is a 409.
    pub version: Option<i64>,
}

/// A file's content: UTF-8 text as is, anything else base64-encoded.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileContent {
    pub path: String,
    pub content: String,
    /// `utf-8` or `base64`.
    pub encoding: &'static str,
    pub size: u64,
    pub version: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteFile {
    #[schema(required = true)]
    pub content: Option<String>,
    /// `utf-8` (default) or `base64`.
    pub encoding: Option<String>,
    pub version: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateEntry {
    #[schema(required = true)]
    pub path: Option<String>,
    /// `file` or `directory`.
    #[serde(rename = "type")]
    #[schema(required = true)]
    pub kind: Option<String>,
    pub version: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenameEntry {
    #[schema(required = true)]
    pub old_path: Option<String>,
    #[schema(required = true)]
    pub new_path: Option<String>,
    pub version: Option<i64>,
}

/// The package version after a change.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Changed {
    pub version: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GenerateRequest {
    #[schema(required = true)]
    pub requirement: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub optimize_instruction: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OptimizeRequest {
    #[schema(required = true)]
    pub requirement: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    /// When empty, the saved `SKILL.md` is optimised.
    pub current_content: Option<String>,
    pub optimize_instruction: Option<String>,
}

/// An AI draft; never saved. Save `skillContent` through the file-content endpoint.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Draft {
    pub name: String,
    pub description: String,
    pub skill_content: String,
    pub warnings: Vec<String>,
}
