//! What one document may cost to parse, whatever its parts.
//!
//! An upload is small, but a zip part or a PDF stream can unpack to gigabytes and a sheet can
//! claim seventeen billion cells; a cap per part still lets a file with many parts take the whole
//! process down (the ingest worker shares it with the API). So every parser charges one budget
//! per document, and a file over it fails with a message, never an allocation failure.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::ParseError;

thread_local! {
    /// The flag of the parse running on this thread (`super::Abandon`): set, every budget's next
    /// charge ends the parse.
    static ABANDONED: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Makes `flag` the running parse's until the guard is dropped (a panic unwinding included): a
/// pooled thread must not carry one parse's flag into the next.
pub(super) fn watch(flag: Arc<AtomicBool>) -> impl Drop {
    struct Unwatch;
    impl Drop for Unwatch {
        fn drop(&mut self) {
            ABANDONED.with(|a| a.borrow_mut().take());
        }
    }
    ABANDONED.with(|a| *a.borrow_mut() = Some(flag));
    Unwatch
}

fn abandoned() -> bool {
    ABANDONED.with(|a| a.borrow().as_ref().is_some_and(|flag| flag.load(Ordering::Relaxed)))
}

/// Bytes a document may unpack to in total: zip parts of docx and xlsx, PDF page content.
/// Real office files and PDFs unpack to a few MiB of XML or drawing operators per 100 pages.
pub const MAX_UNPACKED_BYTES: usize = 256 * 1024 * 1024;

/// Cells read from a workbook, all sheets together: a sheet's declared size is never trusted,
/// only the cells it holds count.
pub(super) const MAX_CELLS: usize = 2_000_000;

/// Text a document may give: one shared string repeated in every cell of a sheet multiplies
/// a small file into gigabytes of text, which chunking and embedding would then pay for.
pub(super) const MAX_TEXT_BYTES: usize = 64 * 1024 * 1024;

const MIB: usize = 1024 * 1024;

/// The limits above, as one value so tests can shrink them instead of building huge files.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub unpacked_bytes: usize,
    pub cells: usize,
    pub text_bytes: usize,
}

impl Limits {
    pub(super) const DOCUMENT: Limits = Limits {
        unpacked_bytes: MAX_UNPACKED_BYTES,
        cells: MAX_CELLS,
        text_bytes: MAX_TEXT_BYTES,
    };

    pub(super) fn unpacked(&self) -> Budget {
        Budget::new(self.unpacked_bytes, "unpacked size")
    }

    pub(super) fn cells(&self) -> Budget {
        Budget::new(self.cells, "number of cells")
    }

    pub(super) fn text(&self) -> Budget {
        Budget::new(self.text_bytes, "text")
    }
}

/// A running total against one of the limits above.
#[derive(Debug)]
pub(super) struct Budget {
    left: usize,
    limit: usize,
    what: &'static str,
}

impl Budget {
    /// `what` names the quantity in the message, e.g. "unpacked size".
    pub(super) fn new(limit: usize, what: &'static str) -> Self {
        Self {
            left: limit,
            limit,
            what,
        }
    }

    pub(super) fn left(&self) -> usize {
        self.left
    }

    /// Takes `amount` from the budget, or says the document is over it. PDF pages and table rows
    /// are charged one by one, so this is also where such a parse nobody waits for stops.
    pub(super) fn charge(&mut self, amount: usize) -> Result<(), ParseError> {
        if abandoned() {
            return Err(ParseError::new("parsing was abandoned: its caller stopped waiting"));
        }
        match self.left.checked_sub(amount) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => {
                self.left = 0;
                Err(self.exceeded())
            }
        }
    }

    pub(super) fn exceeded(&self) -> ParseError {
        ParseError(format!(
            "the document is too large to index: its {} exceeds the limit of {}; split it into smaller files",
            self.what,
            amount(self.limit)
        ))
    }
}

/// Whole MiB for the real limits, the plain number for the small ones tests use.
pub(super) fn amount(limit: usize) -> String {
    if limit >= MIB {
        format!("{} MiB", limit / MIB)
    } else {
        limit.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_refuses_what_goes_past_it_and_stays_spent() {
        let mut budget = Budget::new(10, "cells");
        assert!(budget.charge(6).is_ok());
        assert_eq!(budget.left(), 4);
        let err = budget.charge(5).unwrap_err().to_string();
        assert!(err.contains("cells exceeds the limit of 10"), "{err}");
        assert!(budget.charge(1).is_err(), "a spent budget stays spent");
        let err = Limits::DOCUMENT.unpacked().exceeded().to_string();
        assert!(err.contains("256 MiB") && err.contains("split it"), "{err}");
    }
}
