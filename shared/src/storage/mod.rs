//! Object storage: S3 in production (and on LocalStack), or a local directory.

mod fs;
mod s3;

use std::io;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

pub use fs::{verify_direct_upload, FsStore};
pub use s3::S3Store;

/// `storageType` of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageKind {
    Local,
    Oss,
}

impl StorageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "LOCAL",
            Self::Oss => "OSS",
        }
    }
}

/// An inclusive byte range, already checked against the object size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }
    pub fn is_empty(&self) -> bool {
        false
    }
}

pub type ByteStream = Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

/// A direct-to-storage upload the client performs itself.
#[derive(Debug, Clone)]
pub struct PresignedPut {
    pub url: String,
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("object not found")]
    NotFound,
    /// A write that may only create found an object at its key; nothing was written.
    #[error("an object already exists at this key")]
    Exists,
    /// A streamed upload went past its limit of this many bytes; nothing was stored.
    #[error("upload exceeds the limit of {0} bytes")]
    TooLarge(u64),
    /// The sender's body could not be read to its end (a cancelled upload, broken chunked
    /// encoding, fewer bytes than announced); nothing was stored.
    #[error("the upload could not be read to its end: {0}")]
    BadBody(String),
    /// The store could not be reached (connection refused, timed out).
    #[error("storage unreachable: {0:#}")]
    Unavailable(anyhow::Error),
    #[error("storage failure: {0:#}")]
    Other(#[from] anyhow::Error),
}

impl From<StorageError> for crate::AppError {
    fn from(err: StorageError) -> Self {
        match err {
            StorageError::NotFound => crate::AppError::NotFound("stored file not found".into()),
            StorageError::TooLarge(_) => crate::AppError::PayloadTooLarge(err.to_string()),
            StorageError::BadBody(_) => crate::AppError::validation(err.to_string()),
            StorageError::Exists => crate::AppError::Conflict(
                "this upload URL was used already; ask for a new one to upload another file".into(),
            ),
            StorageError::Unavailable(e) => crate::AppError::unavailable("file storage", e),
            StorageError::Other(e) => crate::AppError::Internal(e.context("object storage")),
        }
    }
}

#[async_trait]
pub trait ObjectStore: Send + Sync {
    fn kind(&self) -> StorageKind;
    async fn put(&self, key: &str, body: Bytes, content_type: &str) -> Result<(), StorageError>;
    /// Stores what `body` yields as it arrives as a new object, staged as a presigned upload's
    /// is until `keep`: refused (`Exists`, nothing written) when one is at `key` already, as a
    /// presigned upload's URL writes once, and (`TooLarge`, nothing stored) once it passes
    /// `limit` bytes. This default gathers the body first, within the limit, and only looks
    /// before writing: stores that serve presigned uploads themselves override it.
    async fn put_stream(
        &self,
        key: &str,
        mut body: ByteStream,
        limit: u64,
        content_type: &str,
    ) -> Result<(), StorageError> {
        if self.head(key).await?.is_some() {
            return Err(StorageError::Exists);
        }
        use futures::StreamExt;
        let mut buf = bytes::BytesMut::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| StorageError::BadBody(e.to_string()))?;
            if (buf.len() + chunk.len()) as u64 > limit {
                return Err(StorageError::TooLarge(limit));
            }
            buf.extend_from_slice(&chunk);
        }
        self.put(key, buf.freeze(), content_type).await
    }
    /// The whole object or one range of it, streamed.
    async fn get(&self, key: &str, range: Option<ByteRange>) -> Result<ByteStream, StorageError>;
    /// The object's size, or None when it does not exist.
    async fn head(&self, key: &str) -> Result<Option<u64>, StorageError>;
    /// Deleting a missing object succeeds.
    async fn delete(&self, key: &str) -> Result<(), StorageError>;
    /// A URL the client PUTs one file of `length` bytes to, and no more: the length is signed,
    /// so a caller cannot store more than it asked for. The object arrives marked as staged:
    /// until `keep` clears the mark, the bucket's lifecycle rule expires it, so an upload
    /// nobody registers does not stay forever.
    async fn presign_put(
        &self,
        key: &str,
        content_type: &str,
        length: u64,
        ttl: Duration,
    ) -> Result<PresignedPut, StorageError>;
    /// Clears the staged mark of a presigned upload once it is registered.
    async fn keep(&self, key: &str) -> Result<(), StorageError>;
    /// Deletes the staged uploads older than `age` (nobody registered them); how many. A store
    /// whose lifecycle rule does this (S3) has nothing to do here.
    async fn expire_staged(&self, _age: Duration) -> Result<u64, StorageError> {
        Ok(0)
    }
    /// Cheap reachability check for /health.
    async fn check(&self) -> Result<(), StorageError>;
}

/// Reads a whole object into memory (small files: parsing, sniffing, zips).
pub async fn read_all(store: &dyn ObjectStore, key: &str, range: Option<ByteRange>) -> Result<Bytes, StorageError> {
    use futures::TryStreamExt;
    let chunks: Vec<Bytes> = store
        .get(key, range)
        .await?
        .try_collect()
        .await
        .map_err(|e| StorageError::Other(e.into()))?;
    Ok(chunks.concat().into())
}

/// Parses a `Range: bytes=...` header against an object of `size` bytes. `Ok(None)` means
/// "send it all"; `Err(())` means the range cannot be satisfied (416).
#[allow(clippy::result_unit_err)]
pub fn parse_range(header: &str, size: u64) -> Result<Option<ByteRange>, ()> {
    // The unit is case-insensitive (RFC 9110); another unit is ignored.
    let header = header.trim();
    let Some(spec) = header
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case("bytes="))
        .map(|_| &header[6..])
    else {
        return Ok(None);
    };
    // Several ranges would need multipart/byteranges; serving the whole body is allowed.
    if spec.contains(',') {
        return Ok(None);
    }
    let (start, end) = spec.split_once('-').ok_or(())?;
    let (start, end) = match (start.trim(), end.trim()) {
        ("", suffix) => {
            let n = position(suffix)?;
            if n == 0 || size == 0 {
                return Err(());
            }
            (size.saturating_sub(n), size - 1)
        }
        (s, "") => (position(s)?, size.checked_sub(1).ok_or(())?),
        (s, e) => (position(s)?, position(e)?.min(size.saturating_sub(1))),
    };
    if start >= size || start > end {
        return Err(());
    }
    Ok(Some(ByteRange { start, end }))
}

/// A byte position of a range: digits only; one past what 64 bits hold is as far as any.
fn position(digits: &str) -> Result<u64, ()> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(());
    }
    Ok(digits.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Ok(Some(ByteRange { start: 0, end: 9 })));
        assert_eq!(
            parse_range("bytes=90-", 100),
            Ok(Some(ByteRange { start: 90, end: 99 }))
        );
        assert_eq!(
            parse_range("bytes=-10", 100),
            Ok(Some(ByteRange { start: 90, end: 99 }))
        );
        assert_eq!(
            parse_range("bytes=50-500", 100),
            Ok(Some(ByteRange { start: 50, end: 99 }))
        );
        assert_eq!(parse_range("bytes=100-", 100), Err(()));
        assert_eq!(parse_range("bytes=5-1", 100), Err(()));
        assert_eq!(parse_range("items=1-2", 100), Ok(None));
        assert_eq!(parse_range("Bytes=0-9", 100), Ok(Some(ByteRange { start: 0, end: 9 })));
        assert_eq!(
            parse_range("bytes=10-99999999999999999999999", 100),
            Ok(Some(ByteRange { start: 10, end: 99 }))
        );
        assert_eq!(parse_range("bytes=+1-2", 100), Err(()));
        assert_eq!(parse_range("bytes=é", 100), Err(()));
    }
}
