//! Reads parts of a zip package (docx, xlsx) with a cap on each part's unpacked size and one on
//! the whole package's, so neither one zip bomb nor many smaller ones can exhaust memory.

use std::io::{Cursor, Read};

use zip::result::ZipError;
use zip::ZipArchive;

use super::limits::Budget;

pub(super) struct ZipEntries<'a> {
    archive: ZipArchive<Cursor<&'a [u8]>>,
    unpacked: Budget,
}

pub(super) enum Entry {
    Missing,
    /// Over the part's cap, or over what is left of the package's.
    TooLarge,
    Bytes(Vec<u8>),
}

impl<'a> ZipEntries<'a> {
    pub(super) fn with_budget(bytes: &'a [u8], unpacked: Budget) -> Result<Self, ZipError> {
        Ok(Self {
            archive: ZipArchive::new(Cursor::new(bytes))?,
            unpacked,
        })
    }

    /// Whether the package's budget ran out: the message for a file refused because of it.
    pub(super) fn budget(&self) -> &Budget {
        &self.unpacked
    }

    pub(super) fn len(&self) -> usize {
        self.archive.len()
    }

    /// The unpacked bytes of `name`, unless they exceed `max_bytes` or what is left of the budget.
    pub(super) fn read(&mut self, name: &str, max_bytes: usize) -> Result<Entry, ZipError> {
        match self.archive.index_for_name(name) {
            Some(index) => self.read_index(index, max_bytes).map(|(_, entry)| entry),
            None => Ok(Entry::Missing),
        }
    }

    /// The name and unpacked bytes of the `index`th part, as [`ZipEntries::read`].
    pub(super) fn read_index(&mut self, index: usize, max_bytes: usize) -> Result<(String, Entry), ZipError> {
        let file = self.archive.by_index(index)?;
        let name = file.name()?.into_owned();
        let cap = max_bytes.min(self.unpacked.left());
        let limit = u64::try_from(cap).unwrap_or(u64::MAX);
        if file.size() > limit {
            return Ok((name, Entry::TooLarge));
        }
        // The declared size can lie; the cap on what is read is what protects memory.
        let mut bytes = Vec::new();
        file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
        // Unpacking cost the time even when the part is then refused, so it is charged either way.
        let within_budget = self.unpacked.charge(bytes.len()).is_ok();
        if bytes.len() > cap || !within_budget {
            return Ok((name, Entry::TooLarge));
        }
        Ok((name, Entry::Bytes(bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::parse::fixtures;
    use crate::rag::parse::limits::Limits;

    fn open(bytes: &[u8]) -> Result<ZipEntries<'_>, ZipError> {
        ZipEntries::with_budget(bytes, Limits::DOCUMENT.unpacked())
    }

    #[test]
    fn entries_are_read_within_the_cap() {
        let bytes = fixtures::zip_archive(&[("a.txt", b"hello".as_slice())]);
        let mut entries = open(&bytes).unwrap();
        assert!(matches!(entries.read("a.txt", 5).unwrap(), Entry::Bytes(b) if b == b"hello"));
        assert!(matches!(entries.read("a.txt", 4).unwrap(), Entry::TooLarge));
        assert!(matches!(entries.read("b.txt", 4).unwrap(), Entry::Missing));
        assert!(open(b"PK\x03\x04garbage").is_err());
    }

    #[test]
    fn parts_share_one_budget_for_the_package() {
        let bytes = fixtures::zip_archive(&[("a.txt", b"hello".as_slice()), ("b.txt", b"world".as_slice())]);
        let mut entries = ZipEntries::with_budget(&bytes, Budget::new(8, "unpacked size")).unwrap();
        assert!(matches!(entries.read("a.txt", 5).unwrap(), Entry::Bytes(_)));
        // Each part fits its own cap; together they do not.
        assert!(matches!(entries.read("b.txt", 5).unwrap(), Entry::TooLarge));
        assert_eq!(
            entries.budget().left(),
            3,
            "a part refused by its declared size costs nothing"
        );
        assert!(matches!(entries.read("a.txt", 5).unwrap(), Entry::TooLarge));
    }
}
