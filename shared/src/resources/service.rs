//! Business rules of uploaded resources.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::repo::{self, NewResource, PageFilter, Reader};
use super::*;
use crate::domain::{CurrentUser, DatetimeRange, Page, PageQuery, StoredFile, UploadedFile};
use crate::storage::{read_all, ByteRange, StorageError};
use crate::{validate, AppError, AppResult, AppState};

/// How long a presigned upload URL may be used.
const PRESIGN_TTL: Duration = Duration::from_secs(15 * 60);
const SNIFF_BYTES: u64 = 8192;

/// The most characters a file name keeps.
const MAX_FILE_NAME_CHARS: usize = 255;

/// Keeps the last path segment, drops control and hidden characters, caps the length. A name
/// too long loses the end of its stem, not its extension, which decides its type.
pub fn clean_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let kept: Vec<char> = base
        .chars()
        .filter(|c| !c.is_control() && !crate::text::hidden(*c))
        .collect();
    let cleaned: String = match kept.len() > MAX_FILE_NAME_CHARS {
        false => kept.into_iter().collect(),
        true => {
            let dot = kept.iter().rposition(|c| *c == '.').filter(|at| kept.len() - at <= 16);
            let extension: String = dot.map(|at| kept[at..].iter().collect()).unwrap_or_default();
            let stem_chars = MAX_FILE_NAME_CHARS - extension.chars().count();
            kept.into_iter().take(stem_chars).collect::<String>() + &extension
        }
    };
    let cleaned = cleaned.trim().to_owned();
    if cleaned.is_empty() || cleaned == "." || cleaned == ".." {
        "file".to_owned()
    } else {
        cleaned
    }
}

/// The MIME type from the bytes' signature, falling back to the file extension.
pub fn sniff_mime(bytes: &[u8], file_name: &str) -> String {
    infer::get(bytes)
        .map(|t| t.mime_type().to_owned())
        .or_else(|| {
            // Text formats have no magic number, so their name tells; an image always has
            // one, so a name claiming an image the bytes do not show is not believed.
            mime_guess::from_path(file_name)
                .first()
                .filter(|m| m.type_() != mime_guess::mime::IMAGE)
                .map(|m| m.essence_str().to_owned())
        })
        .unwrap_or_else(|| "application/octet-stream".to_owned())
}

/// A file named as a JPG, PNG or WEBP image must be one: `mime` (sniffed from its bytes) must
/// be the type its name claims, or the upload is refused naming `field`.
pub fn check_image_claim(field: &str, file_name: &str, mime: &str) -> AppResult<()> {
    let Some(claimed) = mime_guess::from_path(file_name).first() else {
        return Ok(());
    };
    let claimed = claimed.essence_str();
    if matches!(claimed, "image/jpeg" | "image/png" | "image/webp") && claimed != mime {
        return Err(AppError::validation(format!(
            "{field}: {file_name} is named as {claimed} but its content is {mime}"
        )));
    }
    Ok(())
}

fn new_key(user_id: i64, file_name: &str) -> String {
    let ext = std::path::Path::new(file_name)
        .extension()
        .and_then(|e| e.to_str())
        // Not empty: `report.` has the extension "", and a key ending in `.` is not one
        // `is_issued_key` takes, so its upload could never be completed.
        .filter(|e| !e.is_empty() && e.len() <= 10 && e.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(|e| format!(".{}", e.to_ascii_lowercase()))
        .unwrap_or_default();
    format!("resources/{user_id}/{}{ext}", uuid::Uuid::new_v4())
}

/// Whether `key` has the exact shape of a key issued under `prefix`: a UUID and an optional
/// lowercase extension, as `new_key` makes them. Other spellings of the same object (`a//b`,
/// `a/./b`, a trailing `/`) would register one file twice on the filesystem store.
fn is_issued_key(key: &str, prefix: &str) -> bool {
    let Some(name) = key.strip_prefix(prefix) else {
        return false;
    };
    let (id, ext) = name.split_once('.').unwrap_or((name, ""));
    let ext_ok = ext.len() <= 10 && ext.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    // Lowercase, as issued: on a filesystem that ignores case, `67E5...` names the same file
    // as `67e5...`, and one file would be registered twice.
    let id_ok = id.len() == 36 && uuid::Uuid::try_parse(id).is_ok() && !id.chars().any(|c| c.is_ascii_uppercase());
    id_ok && ext_ok && !(name.contains('.') && ext.is_empty())
}

/// A resource's `bizType` as a request gives it: absent when blank.
pub(crate) fn biz_type(value: Option<String>) -> AppResult<Option<String>> {
    let value = validate::optional(value);
    if let Some(v) = &value {
        validate::length("bizType", v, 1, 64)?;
        // Read rules treat this tag specially; a user's own upload must not wear it.
        if v.eq_ignore_ascii_case(KB_PREVIEW_BIZ_TYPE) {
            return Err(AppError::validation(format!(
                "bizType {KB_PREVIEW_BIZ_TYPE} is reserved for knowledge-base uploads"
            )));
        }
    }
    Ok(value)
}

/// The business record an upload belongs to: the client's own id, positive as ids are.
pub(crate) fn biz_id(value: Option<i64>) -> AppResult<Option<i64>> {
    match value {
        Some(id) if id < 1 => Err(AppError::validation("bizId must be a positive whole number")),
        _ => Ok(value),
    }
}

fn reader(user: &CurrentUser) -> Reader {
    Reader {
        user_id: user.id,
        admin: user.is_admin(),
    }
}

/// Stores the bytes, then the row; a failed insert removes the stored object again.
pub async fn upload(
    state: &AppState,
    user: &CurrentUser,
    file: UploadedFile,
    biz_type_in: Option<String>,
    biz_id_in: Option<i64>,
) -> AppResult<ResourceView> {
    let biz_type = biz_type(biz_type_in)?;
    let biz_id = biz_id(biz_id_in)?;
    let name = clean_file_name(&file.file_name);
    let mime = sniff_mime(&file.bytes, &name);
    check_image_claim("file", &name, &mime)?;
    let hash = crate::crypto::content_hash(&file.bytes);
    let key = new_key(user.id, &name);
    let size = file.bytes.len() as i64;
    super::leftovers::put_ahead(state, &key, file.bytes, &mime).await?;
    let new = NewResource {
        storage_key: &key,
        original_name: &name,
        file_size: size,
        mime_type: &mime,
        storage_type: state.storage().kind().as_str(),
        biz_type: biz_type.as_deref(),
        biz_id,
        content_hash: Some(&hash),
        creator_id: user.id,
    };
    insert_or_discard(state, &new).await
}

pub(crate) fn already_registered() -> AppError {
    AppError::business("storageKey is already registered")
}

/// The row for an object just stored, or the object removed again. Not when the key is already
/// registered (two completions of one upload at once): the object is that row's file, and the
/// note this completion wrote, after that row took its own back, must not outlive it.
async fn insert_or_discard(state: &AppState, new: &NewResource<'_>) -> AppResult<ResourceView> {
    match repo::insert(state.db(), new).await {
        Ok(row) => Ok(ResourceView::new(row, state)),
        Err(err) if crate::error::is_unique_violation(&err, "resources_storage_key_key") => {
            super::leftovers::named(state.db(), new.storage_key).await?;
            Err(already_registered())
        }
        Err(err) => {
            super::leftovers::unnamed(state, new.storage_key, super::leftovers::certain(&err)).await;
            Err(err.into())
        }
    }
}

pub async fn page(
    state: &AppState,
    user: &CurrentUser,
    query: PageQuery,
    filter: ResourceFilter,
    range: DatetimeRange,
) -> AppResult<Page<ResourceView>> {
    let f = PageFilter {
        reader: reader(user),
        filter: &filter,
        created: range.0,
    };
    let (rows, total) = repo::page(state.db(), &f, query.size(), query.offset()).await?;
    Ok(Page::new(
        rows.into_iter().map(|r| ResourceView::new(r, state)).collect(),
        query,
        total,
    ))
}

/// The file, to its owner and administrators (see `repo::Reader` for the files nobody else
/// reads); to anyone else exactly the 404 of an unknown id, so ids reveal nothing.
pub async fn file(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<StoredFile> {
    let row = repo::find_readable(state.db(), id, reader(user), false)
        .await?
        .ok_or_else(|| AppError::not_found("resource"))?;
    Ok(StoredFile {
        key: row.storage_key,
        name: row.original_name,
        mime: row.mime_type,
        size: row.file_size as u64,
    })
}

/// Deletes the row, then the object (one whose delete fails is noted for housekeeping): the
/// other way round, a failed commit left a row naming a deleted object. Whoever may read a
/// resource may delete it; others get the 404 of an unknown id.
pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    let mut tx = state.db().begin().await?;
    let row = repo::find_readable(&mut *tx, id, reader(user), true)
        .await?
        .ok_or_else(|| AppError::not_found("resource"))?;
    // A pending upload's file goes with its preview (cancelled, committed or expired): deleted
    // here, the commit would make a document whose file is gone.
    if row.biz_type.as_deref() == Some(KB_PREVIEW_BIZ_TYPE) {
        return Err(AppError::business(
            "this file belongs to a pending knowledge-base upload; cancel the upload instead \
             (DELETE /document/upload/preview/{previewToken})",
        ));
    }
    repo::delete(&mut *tx, id).await?;
    let keys = [row.storage_key];
    super::leftovers::going(&mut tx, &keys).await?;
    tx.commit().await?;
    super::leftovers::delete(state, &keys).await;
    Ok(())
}

pub async fn upload_url(state: &AppState, user: &CurrentUser, req: UploadUrlRequest) -> AppResult<UploadUrlResult> {
    let name = clean_file_name(&validate::required("originalName", req.original_name)?);
    let size = validate::present("fileSize", req.file_size)?;
    let max = state.config().max_presigned_upload_bytes;
    if size < 0 {
        return Err(AppError::validation("fileSize must not be negative"));
    }
    if size as u64 > max {
        return Err(AppError::PayloadTooLarge(format!(
            "fileSize exceeds the limit of {max} bytes"
        )));
    }
    let content_type = validate::optional(req.content_type).unwrap_or_else(|| "application/octet-stream".to_owned());
    if content_type.len() > 255 || content_type.chars().any(|c| c.is_control()) {
        return Err(AppError::validation("contentType is not a valid MIME type"));
    }
    presigned_put(state, new_key(user.id, &name), &content_type, size as u64).await
}

/// A URL that writes the object at `key` once, `length` bytes with `content_type`, for
/// PRESIGN_TTL.
pub(crate) async fn presigned_put(
    state: &AppState,
    key: String,
    content_type: &str,
    length: u64,
) -> AppResult<UploadUrlResult> {
    let presigned = state
        .storage()
        .presign_put(&key, content_type, length, PRESIGN_TTL)
        .await?;
    Ok(UploadUrlResult {
        upload_url: presigned.url,
        method: "PUT".to_owned(),
        headers: presigned.headers.into_iter().collect(),
        storage_key: key,
        expires_at: crate::time::datetime(chrono::Utc::now() + PRESIGN_TTL),
    })
}

pub async fn complete_upload(
    state: &AppState,
    user: &CurrentUser,
    req: CompleteUploadRequest,
) -> AppResult<ResourceView> {
    let key = validate::required("storageKey", req.storage_key)?;
    let name = clean_file_name(&validate::required("originalName", req.original_name)?);
    let biz_type = biz_type(req.biz_type)?;
    let biz_id = biz_id(req.biz_id)?;
    let size = uploaded_size(state, &key, &format!("resources/{}/", user.id), "you").await?;
    let max = state.config().max_presigned_upload_bytes;
    if size > max {
        state.storage().delete(&key).await?;
        return Err(AppError::PayloadTooLarge(format!(
            "uploaded file exceeds the limit of {max} bytes"
        )));
    }
    let mime = sniff_stored(state, &key, &name, size).await?;
    // Refused before it is kept: the staged object expires with the other abandoned uploads.
    check_image_claim("originalName", &name, &mime)?;
    // Noted before it is kept (the staged mark's expiry no longer covers it after that).
    super::leftovers::ahead(state.db(), &key).await?;
    keep_uploaded(state, &key).await?;
    let new = NewResource {
        storage_key: &key,
        original_name: &name,
        file_size: size as i64,
        mime_type: &mime,
        storage_type: state.storage().kind().as_str(),
        biz_type: biz_type.as_deref(),
        biz_id,
        content_hash: None,
        creator_id: user.id,
    };
    insert_or_discard(state, &new).await
}

/// The size of the object a presigned upload put at `key`, for its completion: the key must
/// be one issued under `prefix` (to `whom`, for the refusal) and not registered yet. Checked
/// before anything touches the object: a retried completion must not delete, re-stage or
/// replace the file its first completion registered.
pub(crate) async fn uploaded_size(state: &AppState, key: &str, prefix: &str, whom: &str) -> AppResult<u64> {
    if !is_issued_key(key, prefix) {
        return Err(AppError::Forbidden(format!("storageKey was not issued to {whom}")));
    }
    if repo::is_registered(state.db(), key).await? {
        return Err(already_registered());
    }
    state.storage().head(key).await?.ok_or_else(|| {
        AppError::validation("storageKey: nothing was uploaded there yet; PUT the file to uploadUrl first")
    })
}

/// Takes an upload out of the expiry that removes uploads nobody registers; gone meanwhile (its
/// day was up), it is the caller's to upload again, not a missing file of the service's.
pub(crate) async fn keep_uploaded(state: &AppState, key: &str) -> AppResult<()> {
    state.storage().keep(key).await.map_err(|e| match e {
        StorageError::NotFound => {
            AppError::validation("storageKey: the upload expired before it was registered; upload the file again")
        }
        e => e.into(),
    })
}

/// The MIME type of a stored object of `size` bytes, from its first bytes (as `sniff_mime`).
pub(crate) async fn sniff_stored(state: &AppState, key: &str, name: &str, size: u64) -> AppResult<String> {
    let head = if size == 0 {
        Bytes::new()
    } else {
        read_all(
            state.storage(),
            key,
            Some(ByteRange {
                start: 0,
                end: size.min(SNIFF_BYTES) - 1,
            }),
        )
        .await?
    };
    Ok(sniff_mime(&head, name))
}

/// Receives the bytes of a presigned PUT when objects live on the local filesystem, written
/// as they arrive: a body declared or found larger than MAX_PRESIGNED_UPLOAD_BYTES, or than the
/// size the URL was issued for, is a 413 and leaves nothing stored; one declaring another
/// length than that is refused as S3 refuses it (its length is signed).
pub async fn direct_upload<S, E>(
    state: &AppState,
    q: DirectUploadQuery,
    content_type: &str,
    declared_len: Option<u64>,
    body: S,
) -> AppResult<()>
where
    S: futures::Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display,
{
    if !crate::storage::verify_direct_upload(state.config(), &q.key, q.length, q.expires, &q.sig) {
        return Err(AppError::Forbidden("upload URL is invalid or expired".into()));
    }
    let max = state.config().max_presigned_upload_bytes;
    if declared_len.is_some_and(|n| n > max) {
        return Err(StorageError::TooLarge(max).into());
    }
    let issued = || format!("the upload URL was issued for a file of {} bytes (fileSize)", q.length);
    if let Some(n) = declared_len.filter(|n| *n != q.length) {
        return Err(AppError::validation(format!("Content-Length is {n}, but {}", issued())));
    }
    let body = body.map(|chunk| chunk.map_err(|e| std::io::Error::other(e.to_string())));
    let stored = state
        .storage()
        .put_stream(&q.key, Box::pin(body), q.length.min(max), content_type)
        .await;
    stored.map_err(|e| match e {
        StorageError::TooLarge(_) if q.length < max => {
            AppError::PayloadTooLarge(format!("the body is larger than the URL takes: {}", issued()))
        }
        e => e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_of_the_issued_shape_are_taken() {
        let id = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        for key in [format!("resources/5/{id}"), format!("resources/5/{id}.png")] {
            assert!(is_issued_key(&key, "resources/5/"), "{key}");
        }
        for key in [
            format!("resources/5//{id}.png"),
            format!("resources/5/./{id}.png"),
            format!("resources/5/{id}.png/"),
            format!("resources/5/{id}."),
            format!("resources/5/{id}.PNG"),
            format!("resources/6/{id}.png"),
            format!("resources/5/x/../{id}.png"),
            format!("resources/5/{}.png", id.to_uppercase()),
            "resources/5/not-a-uuid.png".to_owned(),
        ] {
            assert!(!is_issued_key(&key, "resources/5/"), "{key}");
        }
    }

    #[test]
    fn every_issued_key_is_taken_back_whatever_the_name() {
        for name in [
            "report.",
            "a..",
            "...",
            "photo.PNG",
            "archive.tar.gz",
            "noext",
            "x.toolongextension",
        ] {
            let key = new_key(5, name);
            assert!(is_issued_key(&key, "resources/5/"), "{name}: {key}");
        }
    }

    #[test]
    fn names_are_cleaned() {
        assert_eq!(clean_file_name("../../etc/passwd"), "passwd");
        assert_eq!(clean_file_name("C:\\x\\a.png"), "a.png");
        assert_eq!(clean_file_name("a\u{0}b\n.txt"), "ab.txt");
        assert_eq!(clean_file_name(".."), "file");
        assert_eq!(clean_file_name("invoice\u{202E}fdp.exe"), "invoicefdp.exe");
        assert_eq!(clean_file_name("a\u{200B}b\u{2066}c\u{FEFF}.md"), "abc.md");
        let long = format!("{}.csv", "n".repeat(300));
        let kept = clean_file_name(&long);
        assert_eq!(kept.chars().count(), 255);
        assert!(kept.ends_with("nnn.csv"), "{kept}");
        let no_extension = "n".repeat(300);
        assert_eq!(clean_file_name(&no_extension), "n".repeat(255));
    }

    #[test]
    fn mime_from_bytes_beats_extension() {
        let png = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0];
        assert_eq!(sniff_mime(&png, "photo.txt"), "image/png");
        assert_eq!(sniff_mime(b"hello", "notes.txt"), "text/plain");
        assert_eq!(sniff_mime(b"hello", "noext"), "application/octet-stream");
        // A name claiming an image is not believed without the bytes of one.
        assert_eq!(sniff_mime(b"not an image at all", "a.png"), "application/octet-stream");
        assert!(check_image_claim("file", "a.png", "application/octet-stream").is_err());
        assert!(check_image_claim("file", "a.jpg", "image/png").is_err());
        assert!(check_image_claim("file", "a.png", "image/png").is_ok());
        assert!(check_image_claim("file", "notes.txt", "text/plain").is_ok());
    }
}
