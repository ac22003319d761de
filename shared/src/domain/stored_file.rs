//! A stored object to hand back to a client.

/// Shown in the browser or saved as a download.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    Inline,
    Attachment,
}

/// Where a file is stored and what the client is told about it.
#[derive(Debug, Clone)]
pub struct StoredFile {
    pub key: String,
    pub name: String,
    pub mime: String,
    pub size: u64,
}
