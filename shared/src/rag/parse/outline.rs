//! Collects sections in document order while tracking the heading path they sit under.

use crate::rag::document::{Section, SectionKind};

#[derive(Debug, Default)]
pub(super) struct Outline {
    sections: Vec<Section>,
    /// Open headings, outermost first, with their levels (1 = top).
    headings: Vec<(u8, String)>,
}

impl Outline {
    /// Opens a heading: it closes every heading of the same or a deeper level. The heading's own
    /// section carries the path including itself.
    pub(super) fn heading(&mut self, level: u8, text: &str) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        self.headings.retain(|(open, _)| *open < level);
        self.headings.push((level, collapse_whitespace(text)));
        self.push(SectionKind::Heading, text);
    }

    /// Adds a block under the current heading path; blank blocks are dropped.
    pub(super) fn push(&mut self, kind: SectionKind, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        let text = match kind {
            SectionKind::Code => text.trim_end_matches(['\n', '\r']),
            _ => text.trim(),
        };
        self.sections.push(Section {
            kind,
            text: text.to_owned(),
            title: self.title(),
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

    pub(super) fn into_sections(self) -> Vec<Section> {
        self.sections
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
        let titles: Vec<_> = outline.into_sections().into_iter().map(|s| (s.text, s.title)).collect();
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
}
