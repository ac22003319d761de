//! Chat images of external users: JPG, PNG or WEBP, at most 10 MB. Sent as base64 JSON
//! (`upload`, the declared size must match the decoded bytes) or, when a JSON body cannot
//! carry them, PUT to a presigned URL (`upload_url`, then `complete_upload`): API Gateway
//! caps a Lambda request near 6 MB, and base64 makes 10 MB of image 13.4 MB of JSON. Stored
//! as a resource of the app's creator and marked as the uploading external user's, so only
//! that user can attach it.

use base64::Engine as _;

use super::model::{CompleteImageUploadRequest, ImageUploadUrlRequest, UploadRequest, UploadedImage};
use super::{repo, users};
use crate::agents::chat::attachments::MAX_IMAGE_BYTES;
use crate::domain::AppCaller;
use crate::resources::leftovers;
use crate::resources::model::UploadUrlResult;
use crate::resources::repo::{self as resource_repo, NewResource};
use crate::resources::service::{
    already_registered, biz_id, biz_type as resource_biz_type, clean_file_name, presigned_put, sniff_mime,
    sniff_stored, uploaded_size,
};
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

/// Where an app's external users' images are stored; a key outside it was not issued to it.
fn key_prefix(app: &AppCaller) -> String {
    format!("resources/external/{}/", app.id)
}

/// The file extension of an accepted image type, or the refusal naming `field`.
fn image_extension(field: &str, mime: &str) -> AppResult<&'static str> {
    IMAGE_TYPES
        .iter()
        .find(|(m, _)| *m == mime)
        .map(|(_, ext)| *ext)
        .ok_or_else(|| {
            AppError::validation(format!(
                "{field}: only JPG, PNG and WEBP images are accepted (this file is {mime})"
            ))
        })
}

/// The admin API's rule, with a partner's uploads tagged ATTACHMENT unless they say otherwise.
fn biz_type(value: Option<String>) -> AppResult<String> {
    Ok(resource_biz_type(value)?.unwrap_or_else(|| "ATTACHMENT".to_owned()))
}

pub async fn upload(state: &AppState, app: &AppCaller, req: UploadRequest) -> AppResult<UploadedImage> {
    let open_id = users::check_open_id(req.open_id)?;
    let name = clean_file_name(&validate::required("originalName", req.original_name)?);
    let declared = validate::present("fileSize", req.file_size)?;
    validate::range("fileSize", declared, 1, MAX_IMAGE_BYTES)?;
    let content = validate::required("content", req.content)?;
    let biz_type = biz_type(req.biz_type)?;
    let biz_id = biz_id(req.biz_id)?;
    let bytes = decode(&content)?;
    if bytes.len() as i64 != declared {
        return Err(AppError::validation(format!(
            "fileSize {declared} does not match the content ({} bytes)",
            bytes.len()
        )));
    }
    let mime = sniff_mime(&bytes, &name);
    let ext = image_extension("content", &mime)?;
    let key = format!("{}{}.{ext}", key_prefix(app), uuid::Uuid::new_v4());
    let hash = crate::crypto::content_hash(&bytes);
    leftovers::put_ahead(state, &key, bytes.into(), &mime).await?;
    let image = Image {
        key: &key,
        name: &name,
        size: declared,
        mime: &mime,
        hash: Some(&hash),
        biz_type: &biz_type,
        biz_id,
    };
    register(state, app, &open_id, image).await
}

/// A presigned PUT for an image, registered afterwards by `complete_upload`. The URL writes
/// once and expires after 15 minutes; the image's type is checked from its bytes on completion.
pub async fn upload_url(state: &AppState, app: &AppCaller, req: ImageUploadUrlRequest) -> AppResult<UploadUrlResult> {
    let size = validate::present("fileSize", req.file_size)?;
    validate::range("fileSize", size, 1, MAX_IMAGE_BYTES)?;
    let content_type = validate::required("contentType", req.content_type)?.to_ascii_lowercase();
    let ext = image_extension("contentType", &content_type)?;
    let key = format!("{}{}.{ext}", key_prefix(app), uuid::Uuid::new_v4());
    presigned_put(state, key, &content_type, size as u64).await
}

/// Registers an image PUT to a URL of `upload_url` as the external user's. A file that is not
/// an accepted image, or too large, is refused and removed.
pub async fn complete_upload(
    state: &AppState,
    app: &AppCaller,
    req: CompleteImageUploadRequest,
) -> AppResult<UploadedImage> {
    let open_id = users::check_open_id(req.open_id)?;
    let key = validate::required("storageKey", req.storage_key)?;
    let name = clean_file_name(&validate::required("originalName", req.original_name)?);
    let biz_type = biz_type(req.biz_type)?;
    let biz_id = biz_id(req.biz_id)?;
    let size = uploaded_size(state, &key, &key_prefix(app), "this app").await?;
    if size > MAX_IMAGE_BYTES as u64 {
        state.storage().delete(&key).await?;
        return Err(AppError::PayloadTooLarge(format!(
            "the uploaded image exceeds the limit of {MAX_IMAGE_BYTES} bytes"
        )));
    }
    let mime = sniff_stored(state, &key, &name, size).await?;
    if let Err(refused) = image_extension("storageKey", &mime) {
        state.storage().delete(&key).await?;
        return Err(refused);
    }
    // Noted before it is kept (the staged mark's expiry no longer covers it after that).
    leftovers::ahead(state.db(), &key).await?;
    crate::resources::service::keep_uploaded(state, &key).await?;
    let image = Image {
        key: &key,
        name: &name,
        size: size as i64,
        mime: &mime,
        hash: None,
        biz_type: &biz_type,
        biz_id,
    };
    register(state, app, &open_id, image).await
}

/// A stored image, checked.
struct Image<'a> {
    key: &'a str,
    name: &'a str,
    size: i64,
    mime: &'a str,
    hash: Option<&'a str>,
    biz_type: &'a str,
    biz_id: Option<i64>,
}

/// Registers a stored image as the external user's resource, creating the user on first
/// contact. A failure leaves nothing: the object is deleted and a user this request created
/// removed, except that a key registered meanwhile (two completions at once) keeps its file,
/// and one whose registration is unknown is left to the housekeeping (see `leftovers`).
async fn register(state: &AppState, app: &AppCaller, open_id: &str, image: Image<'_>) -> AppResult<UploadedImage> {
    let new = NewResource {
        storage_key: image.key,
        original_name: image.name,
        file_size: image.size,
        mime_type: image.mime,
        storage_type: state.storage().kind().as_str(),
        biz_type: Some(image.biz_type),
        biz_id: image.biz_id,
        content_hash: image.hash,
        creator_id: app.creator_id,
    };
    let mut created = None;
    // A commit whose answer was lost may have stored the row: nothing is undone then.
    let mut maybe_stored = false;
    let stored = async {
        let (user, is_new) = users::ensure(state, app, open_id).await?;
        if is_new {
            created = Some(user);
        }
        let mut tx = state.db().begin().await?;
        let row = resource_repo::insert(&mut *tx, &new).await?;
        repo::own_resource(&mut *tx, row.id, user).await?;
        if let Err(e) = tx.commit().await {
            maybe_stored = !leftovers::certain(&e);
            return Err(e.into());
        }
        Ok::<_, AppError>(row)
    }
    .await;
    let err = match stored {
        Ok(row) => {
            return Ok(UploadedImage {
                resource_id: row.id,
                original_name: row.original_name,
                file_size: row.file_size,
                mime_type: row.mime_type,
                create_dt: time::datetime(row.create_dt),
            })
        }
        Err(err) => err,
    };
    if maybe_stored {
        tracing::warn!(
            key = image.key,
            "an upload's commit may have been stored; its object is left to housekeeping"
        );
        return Err(err);
    }
    // Neither clean-up may end the request early: a database that failed the insert likely
    // fails them too, and the object would stay with no row naming it.
    if let Some(user) = created {
        if let Err(e) = users::remove_created(state, app, open_id, user).await {
            tracing::warn!(error = %e, "an external user created for a failed upload was kept");
        }
    }
    // Only a second completion of the same upload could have registered the key.
    match resource_repo::is_registered(state.db(), image.key).await {
        Ok(true) => {
            if let Err(e) = leftovers::named(state.db(), image.key).await {
                tracing::warn!(error = %e, key = image.key, "a registered object's note was kept");
            }
            return Err(already_registered());
        }
        Ok(false) => leftovers::unnamed(state, image.key, true).await,
        // Its note stays: the housekeeping deletes the object in a day unless a row names it.
        Err(e) => {
            tracing::warn!(error = %e, key = image.key, "whether a failed upload's object is registered is unknown; left to housekeeping")
        }
    }
    Err(err)
}
