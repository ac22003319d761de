//! S3 (and LocalStack) object store.

use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream as S3Body;
use bytes::Bytes;
use tokio_util::io::ReaderStream;

use super::{ByteRange, ByteStream, ObjectStore, PresignedPut, StorageError, StorageKind};

pub struct S3Store {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3Store {
    pub fn new(sdk: &aws_config::SdkConfig, bucket: String) -> Self {
        // A custom endpoint (LocalStack) has no per-bucket DNS names.
        let path_style = sdk.endpoint_url().is_some();
        let conf = aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(path_style)
            .build();
        Self {
            client: aws_sdk_s3::Client::from_conf(conf),
            bucket,
        }
    }
}

/// The tag presigned uploads arrive with; infra/template.yaml expires objects carrying it.
const STAGED_TAG: &str = "staged=true";

fn other<E: std::error::Error + Send + Sync + 'static>(what: &'static str) -> impl FnOnce(E) -> StorageError {
    move |e| StorageError::Other(anyhow::Error::new(e).context(what))
}

/// Like `other`, but a request that never reached S3 (refused, timed out) is `Unavailable`.
fn failed<E, R>(what: &'static str) -> impl FnOnce(SdkError<E, R>) -> StorageError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    move |e| match e {
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => {
            StorageError::Unavailable(anyhow::Error::new(e).context(what))
        }
        e => other(what)(e),
    }
}

#[async_trait]
impl ObjectStore for S3Store {
    fn kind(&self) -> StorageKind {
        StorageKind::Oss
    }

    async fn put(&self, key: &str, body: Bytes, content_type: &str) -> Result<(), StorageError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(S3Body::from(body))
            .send()
            .await
            .map_err(failed("s3 put_object"))?;
        Ok(())
    }

    async fn get(&self, key: &str, range: Option<ByteRange>) -> Result<ByteStream, StorageError> {
        let mut req = self.client.get_object().bucket(&self.bucket).key(key);
        if let Some(r) = range {
            req = req.range(format!("bytes={}-{}", r.start, r.end));
        }
        let out = req.send().await.map_err(|e| match &e {
            SdkError::ServiceError(se) if se.err().is_no_such_key() => StorageError::NotFound,
            _ => failed("s3 get_object")(e),
        })?;
        Ok(Box::pin(ReaderStream::new(out.body.into_async_read())))
    }

    async fn head(&self, key: &str) -> Result<Option<u64>, StorageError> {
        match self.client.head_object().bucket(&self.bucket).key(key).send().await {
            Ok(out) => Ok(Some(out.content_length().unwrap_or(0).max(0) as u64)),
            Err(SdkError::ServiceError(se)) if se.err().is_not_found() => Ok(None),
            Err(e) => Err(failed("s3 head_object")(e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(failed("s3 delete_object"))?;
        Ok(())
    }

    async fn presign_put(
        &self,
        key: &str,
        content_type: &str,
        length: u64,
        ttl: Duration,
    ) -> Result<PresignedPut, StorageError> {
        let config = PresigningConfig::expires_in(ttl)
            .context("presign ttl")
            .map_err(StorageError::Other)?;
        let req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            // Signed: S3 refuses a PUT whose Content-Length is not this one.
            .content_length(i64::try_from(length).unwrap_or(i64::MAX))
            .tagging(STAGED_TAG)
            // The URL writes once: a second PUT (after registration above all) would replace a
            // checked file with an unchecked one, staged again for the lifecycle rule.
            .if_none_match("*")
            .presigned(config)
            .await
            .map_err(other("s3 presign put_object"))?;
        let headers = req.headers().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        Ok(PresignedPut {
            url: req.uri().to_owned(),
            headers,
        })
    }

    async fn keep(&self, key: &str) -> Result<(), StorageError> {
        self.client
            .delete_object_tagging()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(other("s3 delete_object_tagging"))?;
        Ok(())
    }

    async fn check(&self) -> Result<(), StorageError> {
        self.client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .map_err(failed("s3 head_bucket"))?;
        Ok(())
    }
}
