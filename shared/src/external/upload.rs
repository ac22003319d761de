//! Chat images uploaded as base64 JSON: JPG, PNG or WEBP, at most 10 MB, the declared size
//! must match the decoded bytes. Stored as a resource of the app's creator and marked as the
//! uploading external user's, so only that user can attach it.

use base64::Engine as _;

use super::model::{UploadRequest, UploadedImage};
use super::{repo, users};
use crate::agents::chat::attachments::MAX_IMAGE_BYTES;
use crate::domain::AppCaller;
use crate::resources::repo::{self as resource_repo, NewResource};
use crate::resources::service::{clean_file_name, sniff_mime};
use crate::{time, validate, AppError, AppResult, AppState};

/// Base64 of the largest image plus the JSON around it.
pub const MAX_BODY_BYTES: usize = (MAX_IMAGE_BYTES as usize).div_ceil(3) * 4 + 64 * 1024;
const IMAGE_TYPES: [(&str, &str); 3] = [("image/jpeg", "jpg"), ("image/png", "png"), ("image/webp", "webp")];

fn decode(content: &str) -> AppResult<Vec<u8>> {
    let data = match content.split_once(";base64,") {
        Some((prefix, data)) if prefix.starts_with("data:") => data,
        _ => content,
    };
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|_| AppError::validation("content must be base64 of the image bytes"))
}

pub async fn upload(state: &AppState, app: &AppCaller, req: UploadRequest) -> AppResult<UploadedImage> {
    let open_id = users::check_open_id(req.open_id)?;
    let name = clean_file_name(&validate::required("originalName", req.original_name)?);
    let declared = validate::present("fileSize", req.file_size)?;
    validate::range("fileSize", declared, 1, MAX_IMAGE_BYTES)?;
    let content = validate::required("content", req.content)?;
    let biz_type = validate::optional(req.biz_type).unwrap_or_else(|| "ATTACHMENT".to_owned());
    validate::length("bizType", &biz_type, 1, 64)?;
    let bytes = decode(&content)?;
    if bytes.len() as i64 != declared {
        return Err(AppError::validation(format!(
            "fileSize {declared} does not match the content ({} bytes)",
            bytes.len()
        )));
    }
    let mime = sniff_mime(&bytes, &name);
    let Some((_, ext)) = IMAGE_TYPES.iter().find(|(m, _)| *m == mime) else {
        return Err(AppError::validation(format!(
            "content: only JPG, PNG and WEBP images are accepted (this file is {mime})"
        )));
    };
    let (user, created) = users::ensure(state, app, &open_id).await?;
    let image = Image {
        name: &name,
        size: declared,
        biz_type: &biz_type,
        biz_id: req.biz_id,
        bytes,
        mime: &mime,
        ext,
    };
    let stored = store(state, app, user, image).await;
    // A user this request created is gone again when it fails: a failed upload leaves nothing.
    if stored.is_err() && created {
        users::remove_created(state, app, &open_id, user).await?;
    }
    stored
}

/// A checked upload.
struct Image<'a> {
    name: &'a str,
    size: i64,
    biz_type: &'a str,
    biz_id: Option<i64>,
    bytes: Vec<u8>,
    mime: &'a str,
    ext: &'a str,
}

/// Puts the image and registers it as the external user's resource; an object whose row
/// could not be written is deleted again.
async fn store(state: &AppState, app: &AppCaller, user: i64, image: Image<'_>) -> AppResult<UploadedImage> {
    let key = format!("resources/external/{}/{}.{}", app.id, uuid::Uuid::new_v4(), image.ext);
    let hash = crate::crypto::content_hash(&image.bytes);
    state.storage().put(&key, image.bytes.into(), image.mime).await?;
    let new = NewResource {
        storage_key: &key,
        original_name: image.name,
        file_size: image.size,
        mime_type: image.mime,
        storage_type: state.storage().kind().as_str(),
        biz_type: Some(image.biz_type),
        biz_id: image.biz_id,
        content_hash: Some(&hash),
        creator_id: app.creator_id,
    };
    let stored = async {
        let mut tx = state.db().begin().await?;
        let row = resource_repo::insert(&mut *tx, &new).await?;
        repo::own_resource(&mut *tx, row.id, user).await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(row)
    }
    .await;
    match stored {
        Ok(row) => Ok(UploadedImage {
            resource_id: row.id,
            original_name: row.original_name,
            file_size: row.file_size,
            mime_type: row.mime_type,
            create_dt: time::datetime(row.create_dt),
        }),
        Err(err) => {
            if let Err(cleanup) = state.storage().delete(&key).await {
                tracing::error!(key, error = %cleanup, "orphaned object after a failed insert");
            }
            Err(err.into())
        }
    }
}
