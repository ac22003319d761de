//! Default mode: units from the document's structure. A heading opens a group together with the
//! content below it; a change of title opens a group too; paragraphs, tables and code blocks are
//! blocks that stay whole when they fit.

use super::pack::{UnitKind, Units};
use super::split;
use crate::rag::document::{ParsedDocument, SectionKind};

/// Separates blocks (sections, paragraphs) inside a chunk.
const BLOCK_SEP: &str = "\n\n";

pub(super) fn units(doc: &ParsedDocument, max: usize) -> Units<'_> {
    let mut units = Units::default();
    // Title of the current group's content; `None` until some content arrived.
    let mut title: Option<Option<&str>> = None;
    // The current group holds only headings so far, so the next content joins it whatever its title.
    let mut headings_only = false;
    for (index, section) in doc.sections.iter().enumerate() {
        let text = section.text.as_str();
        if text.trim().is_empty() {
            continue;
        }
        if section.kind == SectionKind::Heading {
            if !headings_only {
                units.start_group();
                headings_only = true;
            }
            units.start_block(BLOCK_SEP);
            for piece in split::sentences(text, max) {
                units.push(piece, UnitKind::Heading, index);
            }
            continue;
        }
        let section_title = section.title.as_deref();
        if !headings_only && title != Some(section_title) {
            units.start_group();
        }
        headings_only = false;
        title = Some(section_title);
        if section.kind == SectionKind::Paragraph {
            for paragraph in split::paragraphs(text) {
                units.start_block(BLOCK_SEP);
                for piece in split::sentences(paragraph, max) {
                    units.push(piece, UnitKind::Prose, index);
                }
            }
        } else {
            units.start_block(BLOCK_SEP);
            for piece in split::lines(text, max) {
                units.push(piece, UnitKind::Row, index);
            }
        }
    }
    units
}
