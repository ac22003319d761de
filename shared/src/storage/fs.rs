//! Local-directory object store. Presigned uploads point at the service's own
//! `PUT /resource/direct-upload`, authorised by an HMAC over key, length and expiry. An upload arrives
//! staged: an empty marker file at the same key under `.staged/` says so until the upload is
//! registered (`keep`), and the daily housekeeping deletes uploads staged for longer than a
//! day, as S3's lifecycle rule does with its tagged objects. An expiry first moves the mark
//! under `.expiring/` (a rename: it or a registration's `keep` goes first, never both), then
//! deletes the object.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;

use super::{ByteRange, ByteStream, ObjectStore, PresignedPut, StorageError, StorageKind};
use crate::config::Config;
use crate::crypto::constant_time_eq;

/// The directory of staged marks; no storage key may start with it.
const STAGED_DIR: &str = ".staged";
/// Where the marks of uploads being expired go; no storage key may start with it either.
const EXPIRING_DIR: &str = ".expiring";

pub struct FsStore {
    root: PathBuf,
    signing_key: Vec<u8>,
    upload_url: String,
    /// Uploads mark and place their objects one at a time: two PUTs of one upload URL at once
    /// could otherwise interleave so that the loser removed the mark the winner's object needs,
    /// and that object would never expire. The store serves one process (the local server).
    placing: tokio::sync::Mutex<()>,
}

/// A file written aside, removed when dropped: placed, it is gone already; left by a write
/// that failed, or by an upload whose client went away mid-body (its future dropped before it
/// could clean up), it stayed on disk for good.
struct Aside(PathBuf);

impl Drop for Aside {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl FsStore {
    /// The object's path (its directory made) and a file beside it to write first: objects are
    /// written aside and renamed, so a reader never sees half a file.
    async fn write_aside(&self, key: &str) -> Result<(PathBuf, Aside), StorageError> {
        let path = self.path(key)?;
        make_parent(&path).await.map_err(io_err("creating object dir"))?;
        let tmp = path.with_extension(format!("part-{}", uuid::Uuid::new_v4()));
        Ok((path, Aside(tmp)))
    }

    pub fn new(root: PathBuf, config: &Config) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&root).with_context(|| format!("creating storage dir {}", root.display()))?;
        let base = config.public_base_url.as_deref().unwrap_or("");
        Ok(Self {
            root,
            signing_key: signing_key(config),
            upload_url: format!("{base}/{}/resource/direct-upload", config.api_prefix),
            placing: tokio::sync::Mutex::new(()),
        })
    }

    fn path(&self, key: &str) -> Result<PathBuf, StorageError> {
        let rel = Path::new(key);
        let safe = !key.is_empty()
            && rel.components().all(|c| matches!(c, Component::Normal(_)))
            && !rel.starts_with(STAGED_DIR)
            && !rel.starts_with(EXPIRING_DIR);
        if !safe {
            return Err(StorageError::Other(anyhow::anyhow!(
                "refusing unsafe storage key {key:?}"
            )));
        }
        Ok(self.root.join(rel))
    }

    /// Where the staged mark of the object at `key` (a key `path` took) is.
    fn staged_mark(&self, key: &str) -> PathBuf {
        self.root.join(STAGED_DIR).join(key)
    }

    /// Where that mark is while its upload is being expired.
    fn expiring_mark(&self, key: &str) -> PathBuf {
        self.root.join(EXPIRING_DIR).join(key)
    }

    /// Marks the object at `key` staged; false when a mark was there already (another
    /// upload's, to be left alone).
    async fn mark_staged(&self, key: &str) -> std::io::Result<bool> {
        let mark = self.staged_mark(key);
        make_parent(&mark).await?;
        match tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&mark)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Takes the mark of the upload at `key` away from registration; false when it is gone
    /// (registered meanwhile).
    async fn claim_expiry(&self, key: &str) -> std::io::Result<bool> {
        let claimed = self.expiring_mark(key);
        make_parent(&claimed).await?;
        match tokio::fs::rename(self.staged_mark(key), &claimed).await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes an upload whose mark `claim_expiry` took, then the mark.
    async fn expire(&self, key: &str) -> Result<bool, StorageError> {
        if !self
            .claim_expiry(key)
            .await
            .map_err(io_err("claiming a staged upload"))?
        {
            return Ok(false);
        }
        remove_if_present(&self.path(key)?, "deleting an expired upload").await?;
        remove_if_present(&self.expiring_mark(key), "removing an expired mark").await?;
        Ok(true)
    }
}

/// The staged marks under `dir` (within `marks`, the directory of all of them) last written
/// before `cutoff`, as storage keys.
fn stale_marks(
    marks: &Path,
    dir: &Path,
    cutoff: std::time::SystemTime,
    found: &mut Vec<String>,
) -> std::io::Result<()> {
    // A mark cleared (an upload registered) while the walk passes is simply not there.
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let entries = match std::fs::read_dir(dir) {
        Err(e) if gone(&e) => return Ok(()),
        entries => entries?,
    };
    for entry in entries {
        let entry = entry?;
        let meta = match entry.metadata() {
            Err(e) if gone(&e) => continue,
            meta => meta?,
        };
        if meta.is_dir() {
            stale_marks(marks, &entry.path(), cutoff, found)?;
        } else if meta.modified()? < cutoff {
            if let Some(key) = entry.path().strip_prefix(marks).ok().and_then(Path::to_str) {
                found.push(key.to_owned());
            }
        }
    }
    Ok(())
}

/// Makes the directory a file at `path` goes in.
async fn make_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => tokio::fs::create_dir_all(dir).await,
        None => Ok(()),
    }
}

async fn remove_if_present(path: &Path, what: &'static str) -> Result<(), StorageError> {
    match tokio::fs::remove_file(path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(what)(e)),
        _ => Ok(()),
    }
}

fn signing_key(config: &Config) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&config.encryption_key).expect("hmac takes any key length");
    mac.update(b"fs-direct-upload");
    mac.finalize().into_bytes().to_vec()
}

fn signature(key: &[u8], object_key: &str, length: u64, expires: i64) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("hmac takes any key length");
    mac.update(object_key.as_bytes());
    mac.update(b"\n");
    mac.update(length.to_string().as_bytes());
    mac.update(b"\n");
    mac.update(expires.to_string().as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Checks a direct-upload signature (over the key and the length it was issued for) and expiry.
pub fn verify_direct_upload(config: &Config, object_key: &str, length: u64, expires: i64, sig: &str) -> bool {
    let expected = signature(&signing_key(config), object_key, length, expires);
    expires >= chrono::Utc::now().timestamp() && constant_time_eq(expected.as_bytes(), sig.as_bytes())
}

fn io_err(what: &'static str) -> impl FnOnce(std::io::Error) -> StorageError {
    move |e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            StorageError::NotFound
        } else {
            StorageError::Other(anyhow::Error::new(e).context(what))
        }
    }
}

#[async_trait]
impl ObjectStore for FsStore {
    fn kind(&self) -> StorageKind {
        StorageKind::Local
    }

    async fn put(&self, key: &str, body: Bytes, _content_type: &str) -> Result<(), StorageError> {
        let (path, tmp) = self.write_aside(key).await?;
        tokio::fs::write(&tmp.0, &body)
            .await
            .map_err(io_err("writing object"))?;
        tokio::fs::rename(&tmp.0, &path)
            .await
            .map_err(io_err("renaming object"))?;
        Ok(())
    }

    /// Written to disk chunk by chunk, so an upload of any size costs one chunk of memory, and
    /// put in place by a hard link, which fails when the object exists (a second PUT to a used
    /// upload URL, even one racing the first): a registered file is never replaced.
    async fn put_stream(
        &self,
        key: &str,
        mut body: ByteStream,
        limit: u64,
        _content_type: &str,
    ) -> Result<(), StorageError> {
        use futures::StreamExt;
        use tokio::io::AsyncWriteExt;
        let (path, tmp) = self.write_aside(key).await?;
        // Marked before it is placed: a completion racing the PUT finds the mark to clear, and
        // an upload dropped between the two leaves a mark, never an object that cannot expire.
        // A refused second PUT leaves the first one's mark as it found it.
        let placed = async {
            let mut file = tokio::fs::File::create(&tmp.0)
                .await
                .map_err(io_err("creating object"))?;
            let mut size = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| StorageError::BadBody(e.to_string()))?;
                size += chunk.len() as u64;
                if size > limit {
                    return Err(StorageError::TooLarge(limit));
                }
                file.write_all(&chunk).await.map_err(io_err("writing object"))?;
            }
            file.flush().await.map_err(io_err("writing object"))?;
            let _turn = self.placing.lock().await;
            let ours = self
                .mark_staged(key)
                .await
                .map_err(io_err("marking the upload staged"))?;
            tokio::fs::hard_link(&tmp.0, &path).await.map_err(|e| {
                if ours {
                    let _ = std::fs::remove_file(self.staged_mark(key));
                }
                match e.kind() {
                    std::io::ErrorKind::AlreadyExists => StorageError::Exists,
                    _ => io_err("placing object")(e),
                }
            })
        }
        .await;
        drop(tmp);
        placed
    }

    async fn get(&self, key: &str, range: Option<ByteRange>) -> Result<ByteStream, StorageError> {
        let mut file = tokio::fs::File::open(self.path(key)?)
            .await
            .map_err(io_err("opening object"))?;
        match range {
            None => Ok(Box::pin(ReaderStream::new(file))),
            Some(r) => {
                file.seek(std::io::SeekFrom::Start(r.start))
                    .await
                    .map_err(io_err("seeking object"))?;
                Ok(Box::pin(ReaderStream::new(file.take(r.len()))))
            }
        }
    }

    async fn head(&self, key: &str) -> Result<Option<u64>, StorageError> {
        match tokio::fs::metadata(self.path(key)?).await {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("stat object")(e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        remove_if_present(&self.path(key)?, "deleting object").await?;
        remove_if_present(&self.staged_mark(key), "deleting a staged mark").await
    }

    async fn presign_put(
        &self,
        key: &str,
        content_type: &str,
        length: u64,
        ttl: Duration,
    ) -> Result<PresignedPut, StorageError> {
        self.path(key)?;
        let expires = chrono::Utc::now().timestamp() + ttl.as_secs() as i64;
        let sig = signature(&self.signing_key, key, length, expires);
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("key", key)
            .append_pair("length", &length.to_string())
            .append_pair("expires", &expires.to_string())
            .append_pair("sig", &sig)
            .finish();
        Ok(PresignedPut {
            url: format!("{}?{query}", self.upload_url),
            headers: vec![
                ("content-type".to_owned(), content_type.to_owned()),
                ("content-length".to_owned(), length.to_string()),
            ],
        })
    }

    async fn keep(&self, key: &str) -> Result<(), StorageError> {
        let path = self.path(key)?;
        remove_if_present(&self.staged_mark(key), "clearing a staged mark").await?;
        // An expiry that took the mark first deletes the object: it is not there to keep. One
        // that finished before (mark, object and moved mark gone) left nothing either; with the
        // mark cleared here, no expiry can start on it any more.
        let expiring = tokio::fs::try_exists(self.expiring_mark(key))
            .await
            .map_err(io_err("checking a staged mark"))?;
        let there = tokio::fs::try_exists(&path)
            .await
            .map_err(io_err("checking an object"))?;
        match there && !expiring {
            true => Ok(()),
            false => Err(StorageError::NotFound),
        }
    }

    async fn expire_staged(&self, age: Duration) -> Result<u64, StorageError> {
        let marks = self.root.join(STAGED_DIR);
        let cutoff = std::time::SystemTime::now() - age;
        let walk = tokio::task::spawn_blocking(move || {
            let mut found = Vec::new();
            match std::fs::metadata(&marks) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(found),
                _ => stale_marks(&marks, &marks, cutoff, &mut found).map(|()| found),
            }
        });
        let stale = walk
            .await
            .map_err(|e| StorageError::Other(anyhow::anyhow!("walking staged uploads: {e}")))?
            .map_err(io_err("walking staged uploads"))?;
        let mut expired = 0;
        for key in stale {
            // One upload that cannot be deleted now is tried again at the next run.
            match self.expire(&key).await {
                Ok(done) => expired += u64::from(done),
                Err(e) => tracing::warn!(key, error = %e, "an expired upload could not be deleted"),
            }
        }
        Ok(expired)
    }

    async fn check(&self) -> Result<(), StorageError> {
        tokio::fs::metadata(&self.root).await.map_err(io_err("storage root"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn bytes_on_disk(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => bytes_on_disk(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    }

    /// Each chunk is produced only after checking that the ones before it (but the last,
    /// which may still be in flight) are already on disk: the upload is never gathered in
    /// memory first.
    fn chunks(root: PathBuf, count: u64, size: usize) -> ByteStream {
        Box::pin(futures::stream::iter(0..count).then(move |i| {
            let root = root.clone();
            async move {
                let written = bytes_on_disk(&root);
                assert!(
                    written + size as u64 >= i * size as u64,
                    "chunk {i}: only {written} bytes on disk"
                );
                Ok(Bytes::from(vec![b'a'; size]))
            }
        }))
    }

    #[tokio::test]
    async fn a_streamed_upload_is_written_as_it_arrives_and_over_its_limit_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::new(dir.path().to_path_buf(), &crate::config::test_config()).unwrap();
        let root = dir.path().to_path_buf();
        store
            .put_stream("k/whole.bin", chunks(root.clone(), 20, 4096), 20 * 4096, "x")
            .await
            .unwrap();
        assert_eq!(store.head("k/whole.bin").await.unwrap(), Some(20 * 4096));
        let over = store
            .put_stream("k/over.bin", chunks(root.clone(), 20, 4096), 10 * 4096, "x")
            .await;
        assert!(matches!(over, Err(StorageError::TooLarge(_))), "{over:?}");
        assert_eq!(bytes_on_disk(&root), 20 * 4096, "the refused upload left bytes behind");
    }

    /// An upload whose client goes away mid-body: its future is dropped, and its part file with it.
    #[tokio::test]
    async fn an_upload_dropped_mid_body_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::new(dir.path().to_path_buf(), &crate::config::test_config()).unwrap();
        let first: std::io::Result<Bytes> = Ok(Bytes::from(vec![b'a'; 4096]));
        let stalled: ByteStream = Box::pin(futures::stream::iter([first]).chain(futures::stream::pending()));
        let cut = tokio::time::timeout(
            Duration::from_millis(200),
            store.put_stream("k/cut.bin", stalled, 1 << 20, "x"),
        )
        .await;
        assert!(cut.is_err(), "the upload is still waiting for its body");
        assert_eq!(bytes_on_disk(dir.path()), 0, "the part file of a dropped upload stayed");
    }

    fn upload(text: &'static str) -> ByteStream {
        Box::pin(futures::stream::iter([Ok(Bytes::from_static(text.as_bytes()))]))
    }

    fn age(store: &FsStore, key: &str, by: Duration) {
        let mark = std::fs::File::options()
            .write(true)
            .open(store.staged_mark(key))
            .unwrap();
        mark.set_modified(std::time::SystemTime::now() - by).unwrap();
    }

    /// Uploads stay staged until kept; the ones staged longer than the age go, object and mark.
    /// A second PUT to a used key leaves the first one's mark as it was.
    #[tokio::test]
    async fn uploads_nobody_keeps_expire_and_kept_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::new(dir.path().to_path_buf(), &crate::config::test_config()).unwrap();
        let day = Duration::from_secs(86400);
        for key in ["r/1/old.bin", "r/1/kept.bin", "r/2/new.bin"] {
            store.put_stream(key, upload("bytes"), 100, "x").await.unwrap();
        }
        store.keep("r/1/kept.bin").await.unwrap();
        age(&store, "r/1/old.bin", 2 * day);
        let again = store.put_stream("r/1/old.bin", upload("other"), 100, "x").await;
        assert!(matches!(again, Err(StorageError::Exists)), "{again:?}");

        assert_eq!(store.expire_staged(day).await.unwrap(), 1);
        assert_eq!(store.head("r/1/old.bin").await.unwrap(), None);
        assert!(!store.staged_mark("r/1/old.bin").exists());
        assert_eq!(store.head("r/1/kept.bin").await.unwrap(), Some(5));
        assert_eq!(
            store.head("r/2/new.bin").await.unwrap(),
            Some(5),
            "staged less than a day"
        );
        assert_eq!(store.expire_staged(day).await.unwrap(), 0);
        // A key cannot name a mark.
        assert!(store.head(".staged/r/2/new.bin").await.is_err());
        assert!(store.head(".expiring/r/2/new.bin").await.is_err());
    }

    /// An expiry and a registration of one upload: whichever takes the mark first wins, and a
    /// registered upload is never deleted under its row.
    #[tokio::test]
    async fn an_expiry_and_a_registration_never_both_win() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::new(dir.path().to_path_buf(), &crate::config::test_config()).unwrap();
        let day = Duration::from_secs(86400);
        for key in ["r/1/kept.bin", "r/1/lost.bin"] {
            store.put_stream(key, upload("bytes"), 100, "x").await.unwrap();
            age(&store, key, 2 * day);
        }
        // Registered before the sweep reaches it: kept.
        store.keep("r/1/kept.bin").await.unwrap();
        assert!(!store.claim_expiry("r/1/kept.bin").await.unwrap());
        // Claimed by the sweep first: its registration is refused.
        assert!(store.claim_expiry("r/1/lost.bin").await.unwrap());
        assert!(matches!(store.keep("r/1/lost.bin").await, Err(StorageError::NotFound)));
        assert_eq!(store.expire_staged(day).await.unwrap(), 0, "nothing left marked");
        assert_eq!(store.head("r/1/kept.bin").await.unwrap(), Some(5));
        // Expired whole before its registration came: nothing to keep either (a row naming a
        // missing file was stored).
        store
            .put_stream("r/1/late.bin", upload("bytes"), 100, "x")
            .await
            .unwrap();
        age(&store, "r/1/late.bin", 2 * day);
        assert_eq!(store.expire_staged(day).await.unwrap(), 1);
        assert!(matches!(store.keep("r/1/late.bin").await, Err(StorageError::NotFound)));
    }
}
