//! A file that came with a request.

use bytes::Bytes;

/// One file of a multipart form: the form field it came in, the name the client gave it and
/// its bytes.
#[derive(Debug, Clone)]
pub struct UploadedFile {
    pub field: String,
    pub file_name: String,
    pub bytes: Bytes,
}
