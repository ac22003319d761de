//! Plain text: paragraphs separated by blank lines.

use super::{text_decode, ParseError};
use crate::rag::document::{ParsedDocument, Section, SectionKind};

pub(super) fn parse(bytes: &[u8]) -> Result<ParsedDocument, ParseError> {
    let text = text_decode::decode(bytes)?;
    Ok(ParsedDocument {
        sections: paragraphs(&text)
            .into_iter()
            .map(|text| Section {
                kind: SectionKind::Paragraph,
                text,
                title: None,
                page: None,
            })
            .collect(),
        ..ParsedDocument::default()
    })
}

/// Runs of non-blank lines, each joined with "\n"; line endings are normalised to "\n".
pub(super) fn paragraphs(text: &str) -> Vec<String> {
    let mut paragraphs = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.is_empty() {
                paragraphs.push(current.join("\n"));
                current.clear();
            }
        } else {
            current.push(line);
        }
    }
    if !current.is_empty() {
        paragraphs.push(current.join("\n"));
    }
    paragraphs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_split_on_blank_lines() {
        let source = "\u{FEFF}First line\r\nstill first\r\n\r\n  \nSecond\n\n\nThird";
        let document = parse(source.as_bytes()).unwrap();
        let texts: Vec<_> = document.sections.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts, ["First line\nstill first", "Second", "Third"]);
        assert!(document
            .sections
            .iter()
            .all(|s| s.kind == SectionKind::Paragraph && s.title.is_none()));
    }

    #[test]
    fn unicode_survives() {
        let document = parse("Grüße, 世界 🌍".as_bytes()).unwrap();
        assert_eq!(document.full_text(), "Grüße, 世界 🌍");
    }
}
