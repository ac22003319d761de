//! Reads parts of a zip package (docx) with a cap on their unpacked size, so a zip bomb cannot
//! exhaust memory.

use std::io::{Cursor, Read};

use zip::result::ZipError;
use zip::ZipArchive;

pub(super) struct ZipEntries<'a> {
    archive: ZipArchive<Cursor<&'a [u8]>>,
}

pub(super) enum Entry {
    Missing,
    TooLarge,
    Bytes(Vec<u8>),
}

impl<'a> ZipEntries<'a> {
    pub(super) fn open(bytes: &'a [u8]) -> Result<Self, ZipError> {
        Ok(Self {
            archive: ZipArchive::new(Cursor::new(bytes))?,
        })
    }

    /// The unpacked bytes of `name`, unless they exceed `max_bytes`.
    pub(super) fn read(&mut self, name: &str, max_bytes: usize) -> Result<Entry, ZipError> {
        let file = match self.archive.by_name(name) {
            Ok(file) => file,
            Err(ZipError::FileNotFound) => return Ok(Entry::Missing),
            Err(err) => return Err(err),
        };
        let limit = u64::try_from(max_bytes).unwrap_or(u64::MAX);
        if file.size() > limit {
            return Ok(Entry::TooLarge);
        }
        // The declared size can lie; the cap on what is read is what protects memory.
        let mut bytes = Vec::new();
        file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
        if bytes.len() > max_bytes {
            return Ok(Entry::TooLarge);
        }
        Ok(Entry::Bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::parse::fixtures;

    #[test]
    fn entries_are_read_within_the_cap() {
        let bytes = fixtures::zip_archive(&[("a.txt", b"hello".as_slice())]);
        let mut entries = ZipEntries::open(&bytes).unwrap();
        assert!(matches!(entries.read("a.txt", 5).unwrap(), Entry::Bytes(b) if b == b"hello"));
        assert!(matches!(entries.read("a.txt", 4).unwrap(), Entry::TooLarge));
        assert!(matches!(entries.read("b.txt", 4).unwrap(), Entry::Missing));
        assert!(ZipEntries::open(b"PK\x03\x04garbage").is_err());
    }
}
