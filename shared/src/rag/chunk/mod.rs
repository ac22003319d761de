//! Chunkers: cut a parsed document into chunks small enough to embed, each within
//! `max_tokens` cl100k_base tokens, keeping headings with their content and tables whole where
//! they fit.

mod delimited;
mod pack;
mod params;
mod split;
mod structured;
#[cfg(test)]
mod tests;
mod tokens;

pub use params::{validate, ChunkError, ChunkMode, ChunkParams};
pub use tokens::{count_tokens, prefix_within};

use crate::rag::document::{ParsedDocument, Section, SectionKind};
use delimited::FullText;
use pack::Packed;

#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub content: String,
    pub token_count: usize,
    /// Heading path / sheet of the section the chunk starts in.
    pub title: Option<String>,
    /// Page where the chunk starts.
    pub page: Option<u32>,
    /// Index of the source section the chunk starts in (the "paragraph index").
    pub paragraph_index: usize,
}

pub fn chunk(doc: &ParsedDocument, params: &ChunkParams) -> Result<Vec<Chunk>, ChunkError> {
    validate(params)?;
    let max = params.max_tokens;
    let packed = match &params.mode {
        ChunkMode::Default => pack::pack(&structured::units(doc, max), params),
        ChunkMode::Delimiter(raw) => {
            let delimiter = params::unescape_delimiter(raw);
            let full = FullText::new(doc);
            pack::pack(&delimited::by_delimiter(&full, &delimiter, max), params)
        }
        ChunkMode::Regex(pattern) => {
            let regex = params::compile_regex(pattern)?;
            let full = FullText::new(doc);
            pack::pack(&delimited::by_regex(&full, &regex, max), params)
        }
    };
    Ok(packed.into_iter().map(|p| to_chunk(doc, p)).collect())
}

/// Splits plain text (used when a client edits or adds a chunk by hand, and for `smart`
/// boundaries): same rules as Default mode on one section.
pub fn chunk_text(text: &str, params: &ChunkParams) -> Result<Vec<Chunk>, ChunkError> {
    let section = Section {
        kind: SectionKind::Paragraph,
        text: text.to_owned(),
        title: None,
        page: None,
    };
    let doc = ParsedDocument {
        sections: vec![section],
        ..Default::default()
    };
    chunk(
        &doc,
        &ChunkParams {
            mode: ChunkMode::Default,
            ..params.clone()
        },
    )
}

fn to_chunk(doc: &ParsedDocument, packed: Packed) -> Chunk {
    let section = doc.sections.get(packed.section);
    Chunk {
        content: packed.content,
        token_count: packed.tokens,
        title: doc.sections.get(packed.title_section).and_then(|s| s.title.clone()),
        page: section.and_then(|s| s.page),
        paragraph_index: packed.section,
    }
}
