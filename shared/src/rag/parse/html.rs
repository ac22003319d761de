//! HTML: visible text by block, headings h1-h6 as the title path, tables row by row and `pre` as
//! code. Scripts, styles and other non-text elements are dropped; links and images are not fetched
//! (an image leaves its alt text).

use scraper::node::Node;
use scraper::{ElementRef, Html};

use super::outline::Outline;
use super::{text_decode, ParseError};
use crate::rag::document::{ParsedDocument, SectionKind};

/// Deeper than this, an element's text is taken as a whole: nesting that deep is not structure,
/// and walking it recursively could overflow the stack.
const MAX_DEPTH: usize = 200;

const SKIPPED: &[&str] = &[
    "head", "script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas", "select", "button",
];

const BLOCKS: &[&str] = &[
    "html",
    "body",
    "p",
    "div",
    "li",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "section",
    "article",
    "header",
    "footer",
    "nav",
    "main",
    "aside",
    "blockquote",
    "figure",
    "figcaption",
    "form",
    "fieldset",
    "address",
    "details",
    "summary",
    "hr",
];

pub(super) fn parse(bytes: &[u8]) -> Result<ParsedDocument, ParseError> {
    let source = text_decode::decode(bytes)?;
    let html = Html::parse_document(&source);
    let mut walker = Walker::default();
    walker.element(html.root_element(), 0);
    walker.flush();
    Ok(ParsedDocument {
        sections: walker.outline.into_sections()?,
        ..ParsedDocument::default()
    })
}

#[derive(Default)]
struct Walker {
    outline: Outline,
    /// Inline text of the block being read, whitespace collapsed; '\n' for `br`.
    inline: String,
}

impl Walker {
    fn element(&mut self, element: ElementRef, depth: usize) {
        let name = element.value().name();
        if SKIPPED.contains(&name) {
            return;
        }
        if depth > MAX_DEPTH {
            self.push_text(&visible_text(element));
            return;
        }
        if let Some(level) = heading_level(name) {
            self.flush();
            self.outline.heading(level, &visible_text(element));
        } else if name == "table" {
            self.flush();
            let mut rows = Vec::new();
            collect_rows(element, &mut rows);
            self.outline.push(SectionKind::Table, &rows.join("\n"));
        } else if name == "pre" {
            self.flush();
            self.outline.push(SectionKind::Code, &visible_text(element));
        } else if name == "br" {
            self.inline.push('\n');
        } else if name == "img" {
            if let Some(alt) = element.value().attr("alt") {
                self.push_text(&format!(" {alt} "));
            }
        } else if BLOCKS.contains(&name) {
            self.flush();
            self.children(element, depth);
            self.flush();
        } else {
            self.children(element, depth);
        }
    }

    fn children(&mut self, element: ElementRef, depth: usize) {
        for child in element.children() {
            match child.value() {
                Node::Text(text) => self.push_text(text),
                Node::Element(_) => {
                    if let Some(child) = ElementRef::wrap(child) {
                        self.element(child, depth + 1);
                    }
                }
                _ => {}
            }
        }
    }

    fn push_text(&mut self, text: &str) {
        for c in text.chars() {
            if c.is_whitespace() {
                if !self.inline.is_empty() && !self.inline.ends_with([' ', '\n']) {
                    self.inline.push(' ');
                }
            } else {
                self.inline.push(c);
            }
        }
    }

    fn flush(&mut self) {
        let lines: Vec<&str> = self
            .inline
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect();
        self.outline.push(SectionKind::Paragraph, &lines.join("\n"));
        self.inline.clear();
    }
}

fn heading_level(name: &str) -> Option<u8> {
    match name {
        "h1" => Some(1),
        "h2" => Some(2),
        "h3" => Some(3),
        "h4" => Some(4),
        "h5" => Some(5),
        "h6" => Some(6),
        _ => None,
    }
}

/// The text of `element` a reader sees: its descendants' but for what `SKIPPED` names (a
/// style sheet or a script inside a cell or a heading). Walked without recursion, as it is
/// used past `MAX_DEPTH`.
fn visible_text(element: ElementRef) -> String {
    use ego_tree::iter::Edge;
    let mut text = String::new();
    // Elements open inside a skipped one, itself included.
    let mut skipping = 0usize;
    for edge in element.traverse() {
        match edge {
            Edge::Open(node) => match node.value() {
                scraper::Node::Element(e) if skipping > 0 || SKIPPED.contains(&e.name()) => skipping += 1,
                scraper::Node::Text(t) if skipping == 0 => text.push_str(t),
                _ => {}
            },
            Edge::Close(node) if node.value().is_element() && skipping > 0 => skipping -= 1,
            Edge::Close(_) => {}
        }
    }
    text
}

/// The rows of `table` (not of tables nested in its cells), cells joined by " | ".
fn collect_rows(element: ElementRef, rows: &mut Vec<String>) {
    for child in element.children().filter_map(ElementRef::wrap) {
        match child.value().name() {
            "tr" => {
                let cells: Vec<String> = child
                    .children()
                    .filter_map(ElementRef::wrap)
                    .filter(|cell| matches!(cell.value().name(), "td" | "th"))
                    .map(|cell| collapse_whitespace(&visible_text(cell)))
                    .collect();
                if cells.iter().any(|cell| !cell.is_empty()) {
                    rows.push(cells.join(" | "));
                }
            }
            "thead" | "tbody" | "tfoot" => collect_rows(child, rows),
            _ => {}
        }
    }
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sections(source: &str) -> Vec<(SectionKind, String, Option<String>)> {
        parse(source.as_bytes())
            .unwrap()
            .sections
            .into_iter()
            .map(|s| (s.kind, s.text, s.title))
            .collect()
    }

    #[test]
    fn blocks_headings_and_tables() {
        let source = r#"<!DOCTYPE html><html><head><title>T</title><style>p { color: red }</style></head>
            <body><script>var x = "hidden";</script>
            <p>Intro   text with <b>bold</b> and <a href="x">a link</a>.</p>
            <h1>Install</h1>
            <div>On Linux:<br>run apt</div>
            <h2>Options</h2>
            <ul><li>first</li><li>second <img src="a.png" alt="diagram"></li></ul>
            <table><thead><tr><th>Name</th><th>Value</th></tr></thead>
              <tbody><tr><td>a &amp; b</td><td> 1 </td></tr><tr><td></td><td></td></tr></tbody></table>
            <pre>  code
    indented</pre>
            <h1>Next</h1><p>End</p></body></html>"#;
        let s = |kind, text: &str, title: Option<&str>| (kind, text.to_owned(), title.map(str::to_owned));
        let p = SectionKind::Paragraph;
        assert_eq!(
            sections(source),
            [
                s(p, "Intro text with bold and a link.", None),
                s(SectionKind::Heading, "Install", Some("Install")),
                s(p, "On Linux:\nrun apt", Some("Install")),
                s(SectionKind::Heading, "Options", Some("Install > Options")),
                s(p, "first", Some("Install > Options")),
                s(p, "second diagram", Some("Install > Options")),
                s(SectionKind::Table, "Name | Value\na & b | 1", Some("Install > Options")),
                s(SectionKind::Code, "  code\n    indented", Some("Install > Options")),
                s(SectionKind::Heading, "Next", Some("Next")),
                s(p, "End", Some("Next")),
            ]
        );
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let source = format!(
            "{}deep text{}",
            "<div><span>".repeat(1000),
            "</span></div>".repeat(1000)
        );
        let got = sections(&source);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, "deep text");
    }

    /// Styles and scripts inside a cell, a heading or past the depth limit are not text.
    #[test]
    fn scripts_and_styles_inside_cells_headings_and_deep_nesting_are_skipped() {
        let source = r#"<h2><style>.h { color: red }</style>Pricing</h2>
            <table><tr><td><style>.x{}</style>Plan</td><td><script>track()</script>10</td></tr></table>"#;
        let got = sections(source);
        assert_eq!(got[0].1, "Pricing");
        assert_eq!(got[1].1, "Plan | 10");
        let deep = format!(
            "{}deep <script>hidden()</script>text{}",
            "<div>".repeat(300),
            "</div>".repeat(300)
        );
        assert_eq!(sections(&deep)[0].1, "deep text");
    }

    #[test]
    fn a_fragment_without_html_or_body_is_read() {
        assert_eq!(sections("just <i>text</i>")[0].1, "just text");
    }
}
