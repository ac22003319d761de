//! Default mode: units from the document's structure. A heading opens a group together with the
//! content below it; a change of title opens a group too; paragraphs, tables and code blocks are
//! blocks that stay whole when they fit.

use super::pack::{UnitKind, Units};
use super::split::{self, Piece};
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
            let rows = split::lines(text, max);
            match header_len(section.kind, &rows, max) {
                Some(header) => push_with_header(&mut units, rows, header, max, index),
                None => {
                    units.start_block(BLOCK_SEP);
                    for row in rows {
                        units.push(row, UnitKind::Row, index);
                    }
                }
            }
        }
    }
    units
}

/// How many lines head a table of `|` rows (Markdown, HTML, DOCX) too long for one chunk: its
/// first row, and the Markdown delimiter row under it. None for a table that fits, one of other
/// rows (CSV and sheets already name each value's column in its row), or one whose header would
/// take over a quarter of every chunk.
fn header_len(kind: SectionKind, rows: &[Piece<'_>], max: usize) -> Option<usize> {
    if kind != SectionKind::Table || rows.len() < 3 || !rows.iter().all(|r| r.text.contains('|')) {
        return None;
    }
    let len = if is_delimiter_row(rows[1].text) { 2 } else { 1 };
    let cost = |rows: &[Piece<'_>]| rows.iter().map(|r| r.tokens + 1).sum::<usize>();
    (cost(rows) > max && cost(&rows[..len]) <= max / 4).then_some(len)
}

/// `|---|:--:|` and the like.
fn is_delimiter_row(row: &str) -> bool {
    let cells = row.trim().trim_start_matches('|').trim_end_matches('|');
    cells.split('|').all(|cell| {
        let dashes = cell.trim().trim_matches(':');
        dashes.len() >= 3 && dashes.chars().all(|c| c == '-')
    })
}

/// A table too long for one chunk as blocks that each fill a chunk, every block after the first
/// opening with a copy of the table's header lines: rows cut off from their column names
/// ("| A-77 | 12.50 |") ranked poorly for what the columns mean.
fn push_with_header<'a>(units: &mut Units<'a>, rows: Vec<Piece<'a>>, header: usize, max: usize, index: usize) {
    let header_rows: Vec<(&'a str, usize)> = rows[..header].iter().map(|r| (r.text, r.tokens)).collect();
    let header_cost: usize = header_rows.iter().map(|(_, tokens)| tokens + 1).sum();
    // A token or two of margin a block: the packer counts separators its own way.
    let budget = max.saturating_sub(2);
    units.start_block(BLOCK_SEP);
    // The first block leaves a quarter of a chunk for what the chunk may hold already (the
    // heading above the table, a short paragraph), or its last rows would spill, headerless,
    // into a chunk of their own.
    let mut used = max / 4;
    for (k, row) in rows.into_iter().enumerate() {
        if k >= header && used + row.tokens + 1 > budget {
            units.start_block_alone(BLOCK_SEP);
            for &(text, tokens) in &header_rows {
                units.push(
                    Piece {
                        sep: "\n",
                        text,
                        tokens,
                    },
                    UnitKind::Row,
                    index,
                );
            }
            used = header_cost;
        }
        used += row.tokens + 1;
        units.push(row, UnitKind::Row, index);
    }
}
