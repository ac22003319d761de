//! Wire shapes of the resources module.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::{time, AppState};

/// `bizType` of the files a knowledge-base upload preview stores until it is committed or
/// cancelled. Reserved: `/resource` uploads may not use it, so the tag always means that.
pub const KB_PREVIEW_BIZ_TYPE: &str = "RAG_UPLOAD_PREVIEW";

/// `bizType` of an upload meant for a knowledge base: only those can be taken into an upload
/// preview, which moves the file (an avatar or a chat image taken would break where it is shown).
pub const DOCUMENT_BIZ_TYPE: &str = "document";

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ResourceRow {
    pub id: i64,
    pub storage_key: String,
    pub original_name: String,
    pub file_size: i64,
    pub mime_type: String,
    pub storage_type: String,
    pub biz_type: Option<String>,
    pub biz_id: Option<i64>,
    pub content_hash: Option<String>,
    pub creator_id: i64,
    pub create_dt: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceView {
    pub id: i64,
    pub storage_key: String,
    pub original_name: String,
    /// Size in bytes.
    pub file_size: i64,
    pub mime_type: String,
    /// LOCAL (filesystem) or OSS (S3).
    pub storage_type: String,
    /// Where the file can be previewed (needs Svc-Auth).
    pub access_url: String,
    pub biz_type: Option<String>,
    pub biz_id: Option<i64>,
    pub creator_id: i64,
    pub create_dt: String,
}

impl ResourceView {
    pub fn new(row: ResourceRow, state: &AppState) -> Self {
        Self {
            access_url: state.link(&format!("/resource/{}/preview", row.id)),
            id: row.id,
            storage_key: row.storage_key,
            original_name: row.original_name,
            file_size: row.file_size,
            mime_type: row.mime_type,
            storage_type: row.storage_type,
            biz_type: row.biz_type,
            biz_id: row.biz_id,
            creator_id: row.creator_id,
            create_dt: time::datetime(row.create_dt),
        }
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ResourceFilter {
    pub biz_type: Option<String>,
    pub biz_id: Option<i64>,
    /// Substring of the original file name.
    pub original_name: Option<String>,
}

/// Asks for a presigned PUT, for files above the direct-upload limit.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UploadUrlRequest {
    pub original_name: Option<String>,
    /// Size in bytes of the file that will be sent.
    pub file_size: Option<i64>,
    /// MIME type the client will send as Content-Type (default application/octet-stream).
    pub content_type: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UploadUrlResult {
    /// PUT the file's bytes here, with the listed headers.
    pub upload_url: String,
    pub method: String,
    pub headers: std::collections::BTreeMap<String, String>,
    /// Pass to /resource/upload/complete afterwards.
    pub storage_key: String,
    pub expires_at: String,
}

/// Registers a file sent through a presigned PUT.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompleteUploadRequest {
    pub storage_key: Option<String>,
    pub original_name: Option<String>,
    pub biz_type: Option<String>,
    pub biz_id: Option<i64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DirectUploadQuery {
    pub key: String,
    /// The file's size the URL was issued for (`fileSize`).
    pub length: u64,
    pub expires: i64,
    pub sig: String,
}
