//! Image attachments of a chat message: every rule is checked before anything is stored, and
//! the images are read only once the stream has started.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::models::ModelConfigRow;
use crate::resources::repo::{self as resource_repo, Reader};
use crate::resources::ResourceRow;
use crate::storage::{read_all, ByteRange, StorageError};
use crate::{AppError, AppResult, AppState};

pub const MAX_IMAGES_PER_CONVERSATION: i64 = 3;
pub const MAX_IMAGE_BYTES: i64 = 10 * 1024 * 1024;
const IMAGE_TYPES: [&str; 3] = ["image/jpeg", "image/png", "image/webp"];

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentIn {
    /// `IMAGE`.
    #[serde(rename = "type")]
    #[schema(required = true)]
    pub kind: Option<String>,
    /// An uploaded resource.
    #[schema(required = true)]
    pub resource_id: Option<i64>,
}

/// A checked image, as stored on the message.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// `IMAGE`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub resource_id: i64,
    #[serde(skip)]
    pub storage_key: String,
    #[serde(skip)]
    pub mime_type: String,
}

/// Whose uploads a caller may attach.
#[derive(Debug, Clone, Copy)]
pub enum ResourceOwner {
    /// An admin-API user: what `/resource` lets them read (administrators not an external
    /// user's image nor someone's knowledge-base upload in progress).
    User(Reader),
    /// An external user: the images they uploaded through the external API.
    External(i64),
}

impl ResourceOwner {
    /// The resource if this caller may attach it; None exactly as for an unknown id.
    async fn find(self, state: &AppState, id: i64) -> AppResult<Option<ResourceRow>> {
        let found = match self {
            Self::User(reader) => resource_repo::find_readable(state.db(), id, reader, false).await?,
            Self::External(user) => resource_repo::find_external_upload(state.db(), id, user).await?,
        };
        Ok(found)
    }
}

fn megabytes(bytes: i64) -> String {
    format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
}

fn check_resource(field: &str, r: &ResourceRow) -> AppResult<()> {
    if !IMAGE_TYPES.contains(&r.mime_type.as_str()) {
        return Err(AppError::validation(format!(
            "{field}: only JPG, PNG and WEBP images are accepted (this file is {})",
            r.mime_type
        )));
    }
    if r.file_size > MAX_IMAGE_BYTES {
        return Err(AppError::validation(format!(
            "{field}: an image may be at most 10 MB (this one is {})",
            megabytes(r.file_size)
        )));
    }
    Ok(())
}

/// Checks the attachments against the model and the uploads, and that one message holds no
/// more than a conversation may (what the conversation holds already: `check_count`, under its lock).
pub async fn check(
    state: &AppState,
    items: Vec<AttachmentIn>,
    model: &ModelConfigRow,
    owner: ResourceOwner,
) -> AppResult<Vec<Image>> {
    if items.is_empty() {
        return Ok(vec![]);
    }
    let mut images = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let field = format!("attachments[{i}]");
        match item.kind.as_deref().map(str::trim) {
            Some(k) if k.eq_ignore_ascii_case("IMAGE") => {}
            Some(_) => return Err(AppError::validation(format!("{field}.type must be IMAGE"))),
            None => return Err(AppError::validation(format!("{field}.type is required"))),
        }
        let id = item
            .resource_id
            .ok_or_else(|| AppError::validation(format!("{field}.resourceId is required")))?;
        images.push((field, id));
    }
    check_count(0, images.len())?;
    // One image sent twice would count twice against the conversation's images and reach the
    // model twice: a client's slip, told rather than kept.
    for (i, (field, id)) in images.iter().enumerate() {
        if images[..i].iter().any(|(_, earlier)| earlier == id) {
            return Err(AppError::validation(format!(
                "{field}.resourceId: resource {id} is already attached to this message"
            )));
        }
    }
    let mut checked = Vec::with_capacity(images.len());
    for (field, id) in images {
        let resource = owner
            .find(state, id)
            .await?
            .ok_or_else(|| AppError::validation(format!("{field}.resourceId: resource {id} does not exist")))?;
        check_resource(&field, &resource)?;
        checked.push(Image {
            kind: "IMAGE",
            resource_id: id,
            storage_key: resource.storage_key,
            mime_type: resource.mime_type,
        });
    }
    // After the lookups: an image the caller may not attach is unknown whatever the model.
    if !model.has_capability("vision") {
        return Err(AppError::validation(format!(
            "attachments: the agent's chat model {} does not accept images (its capabilities lack vision)",
            model.model_name
        )));
    }
    Ok(checked)
}

/// A conversation holding `images_so_far` may take `adding` more.
pub fn check_count(images_so_far: i64, adding: usize) -> AppResult<()> {
    if images_so_far + adding as i64 > MAX_IMAGES_PER_CONVERSATION {
        return Err(AppError::validation(format!(
            "attachments: a conversation may hold at most {MAX_IMAGES_PER_CONVERSATION} images \
             (it has {images_so_far}, this message adds {adding})"
        )));
    }
    Ok(())
}

/// The images as `data:` URIs for the model. Each is read up to the size its object has now,
/// and refused above the limit: an upload URL stays valid for a while after the upload was
/// registered, and what was PUT again under it must not be read into memory whole.
pub async fn data_uris(state: &AppState, images: &[Image]) -> Result<Vec<String>, String> {
    let mut uris = Vec::with_capacity(images.len());
    for image in images {
        // The store's own words (the SDK's, an address) go to the log, not to whoever chats.
        let failed = |e: StorageError| {
            tracing::warn!(resource_id = image.resource_id, error = %e, "reading an attached image failed");
            format!(
                "reading image {} failed: the file store did not answer; try again",
                image.resource_id
            )
        };
        let size = state
            .storage()
            .head(&image.storage_key)
            .await
            .map_err(failed)?
            .ok_or_else(|| format!("image {} is no longer stored", image.resource_id))?;
        if size > MAX_IMAGE_BYTES as u64 {
            return Err(format!(
                "image {} has grown past {} since it was uploaded",
                image.resource_id,
                megabytes(MAX_IMAGE_BYTES)
            ));
        }
        let range = (size > 0).then(|| ByteRange {
            start: 0,
            end: size - 1,
        });
        let bytes = read_all(state.storage(), &image.storage_key, range)
            .await
            .map_err(failed)?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
        uris.push(format!("data:{};base64,{encoded}", image.mime_type));
    }
    Ok(uris)
}
