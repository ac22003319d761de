//! Collects sections in document order while tracking the heading path they sit under.

use super::limits::{Budget, Limits};
use super::ParseError;
use crate::rag::document::{Section, SectionKind};
use crate::text::excerpt;

/// Characters of one heading in a section's title: every section under it carries the path, so
/// a heading of megabytes over many short paragraphs multiplied into gigabytes.
pub(super) const MAX_TITLE_PART_CHARS: usize = 200;

#[derive(Debug)]
pub(super) struct Outline {
    sections: Vec<Section>,
    /// Open headings, outermost first, with their levels (1 = top).
    headings: Vec<(u8, String)>,
    /// Text and titles kept so far. Once over it, nothing more is kept and the document fails.
    text: Budget,
    over: Option<ParseError>,
}

impl Default for Outline {
    fn default() -> Self {
        Self::with_budget(Limits::DOCUMENT.text())
    }
}

impl Outline {
    pub(super) fn with_budget(text: Budget) -> Self {
        Self {
            sections: Vec::new(),
            headings: Vec::new(),
            text,
            over: None,
        }
    }

    /// Opens a heading: it closes every heading of the same or a deeper level. The heading's own
    /// section carries the path including itself.
    pub(super) fn heading(&mut self, level: u8, text: &str) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        self.headings.retain(|(open, _)| *open < level);
        self.headings
            .push((level, excerpt(&collapse_whitespace(text), MAX_TITLE_PART_CHARS)));
        self.push(SectionKind::Heading, text);
    }

    /// Adds a block under the current heading path; blank blocks are dropped.
    pub(super) fn push(&mut self, kind: SectionKind, text: &str) {
        if text.trim().is_empty() || self.over.is_some() {
            return;
        }
        let text = match kind {
            SectionKind::Code => text.trim_end_matches(['\n', '\r']),
            _ => text.trim(),
        };
        let title = self.title();
        let size = text.len() + title.as_ref().map_or(0, String::len);
        if let Err(e) = self.text.charge(size) {
            self.over = Some(e);
            return;
        }
        self.sections.push(Section {
            kind,
            text: text.to_owned(),
            title,
            page: None,
        });
    }

    /// The heading path, e.g. "Install > Linux".
    pub(super) fn title(&self) -> Option<String> {
        if self.headings.is_empty() {
            return None;
        }
        Some(
            self.headings
                .iter()
                .map(|(_, text)| text.as_str())
                .collect::<Vec<_>>()
                .join(" > "),
        )
    }

    /// The sections, or why the document is too large to index.
    pub(super) fn into_sections(self) -> Result<Vec<Section>, ParseError> {
        match self.over {
            Some(e) => Err(e),
            None => Ok(self.sections),
        }
    }
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heading_closes_its_siblings_and_children() {
        let mut outline = Outline::default();
        outline.push(SectionKind::Paragraph, "intro");
        outline.heading(1, "Install");
        outline.heading(2, "Linux");
        outline.push(SectionKind::Paragraph, "apt");
        outline.heading(2, "Mac");
        outline.push(SectionKind::Paragraph, "brew");
        outline.heading(1, "Use");
        outline.push(SectionKind::Paragraph, "run");
        let titles: Vec<_> = outline
            .into_sections()
            .unwrap()
            .into_iter()
            .map(|s| (s.text, s.title))
            .collect();
        let expected = [
            ("intro", None),
            ("Install", Some("Install")),
            ("Linux", Some("Install > Linux")),
            ("apt", Some("Install > Linux")),
            ("Mac", Some("Install > Mac")),
            ("brew", Some("Install > Mac")),
            ("Use", Some("Use")),
            ("run", Some("Use")),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(t, h)| (t.to_string(), h.map(str::to_owned)))
            .collect();
        assert_eq!(titles, expected);
    }

    #[test]
    fn a_long_heading_is_cut_in_the_titles_under_it() {
        let mut outline = Outline::default();
        let heading = "h".repeat(5000);
        outline.heading(1, &heading);
        outline.push(SectionKind::Paragraph, "x");
        let sections = outline.into_sections().unwrap();
        assert_eq!(sections[0].text, heading, "the heading's own text is whole");
        let title = sections[1].title.as_deref().unwrap();
        assert_eq!(title.chars().count(), MAX_TITLE_PART_CHARS + 1);
        assert!(title.ends_with('…'));
    }

    #[test]
    fn text_and_titles_past_the_budget_fail_the_document() {
        let mut outline = Outline::with_budget(Budget::new(10_000, "text"));
        outline.heading(1, &"h".repeat(150));
        // 100 paragraphs of one byte carry 15,000 bytes of titles.
        for _ in 0..100 {
            outline.push(SectionKind::Paragraph, "x");
        }
        let err = outline.into_sections().unwrap_err();
        assert!(err.to_string().contains("text exceeds the limit"), "{err}");
    }
}
