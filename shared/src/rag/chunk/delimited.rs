//! Delimiter and Regex modes: the document's full text is cut into pieces by the client's rule,
//! and each piece is a block packed like a paragraph.

use regex::Regex;

use super::pack::{UnitKind, Units};
use super::split;
use crate::rag::document::ParsedDocument;

/// The document's full text (as [`ParsedDocument::full_text`]) with where each section starts,
/// so a chunk can name the section it starts in.
pub(super) struct FullText {
    text: String,
    starts: Vec<usize>,
}

impl FullText {
    pub fn new(doc: &ParsedDocument) -> Self {
        let mut text = String::with_capacity(doc.sections.iter().map(|s| s.text.len() + 2).sum());
        let mut starts = Vec::with_capacity(doc.sections.len());
        for (k, section) in doc.sections.iter().enumerate() {
            if k > 0 {
                text.push_str("\n\n");
            }
            starts.push(text.len());
            text.push_str(&section.text);
        }
        Self { text, starts }
    }

    /// Section holding `inner`, which must be a slice of this text.
    fn section_of(&self, inner: &str) -> usize {
        let offset = inner.as_ptr() as usize - self.text.as_ptr() as usize;
        self.starts.partition_point(|&start| start <= offset).saturating_sub(1)
    }

    fn push_piece<'a>(&'a self, units: &mut Units<'a>, sep: &'a str, piece: &'a str, max: usize) {
        units.start_block(sep);
        for sentence in split::sentences(piece, max) {
            let section = self.section_of(sentence.text);
            units.push(sentence, UnitKind::Prose, section);
        }
    }
}

/// Pieces between occurrences of `delimiter`, which is dropped. Pieces are rejoined with the
/// delimiter when it is whitespace (a paragraph break stays one), else with a newline.
pub(super) fn by_delimiter<'a>(full: &'a FullText, delimiter: &'a str, max: usize) -> Units<'a> {
    let sep = if delimiter.trim().is_empty() { delimiter } else { "\n" };
    let mut units = Units::default();
    units.start_group();
    for piece in full.text.split(delimiter) {
        let piece = piece.trim();
        if !piece.is_empty() {
            full.push_piece(&mut units, sep, piece, max);
        }
    }
    units
}

/// Pieces starting where `regex` matches; the match stays at the start of its piece.
pub(super) fn by_regex<'a>(full: &'a FullText, regex: &Regex, max: usize) -> Units<'a> {
    let cuts: Vec<usize> = regex
        .find_iter(&full.text)
        .map(|m| m.start())
        .filter(|&start| start > 0)
        .collect();
    let mut units = Units::default();
    units.start_group();
    for (sep, piece) in split::spans(&full.text, cuts) {
        full.push_piece(&mut units, sep, piece, max);
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::document::{Section, SectionKind};

    #[test]
    fn finds_the_section_of_a_slice() {
        let section = |text: &str| Section {
            kind: SectionKind::Paragraph,
            text: text.into(),
            title: None,
            page: None,
        };
        let doc = ParsedDocument {
            sections: vec![section("one"), section("two")],
            ..Default::default()
        };
        let full = FullText::new(&doc);
        assert_eq!(full.text, doc.full_text());
        assert_eq!(full.section_of(&full.text[0..3]), 0);
        assert_eq!(full.section_of(&full.text[3..5]), 0);
        assert_eq!(full.section_of(&full.text[5..8]), 1);
    }
}
