//! Markdown: headings (ATX and setext), fenced code, pipe tables and paragraphs, read line by line
//! so every block keeps its source text. Images are replaced by their alt text; links stay as
//! written. Images written in as `data:` URIs (what a converter such as Docling embeds) are kept
//! as the document's images when the options ask for them; others are never fetched.

use base64::Engine;

use super::image_collector::{ImageCollector, ImagePlace};
use super::outline::Outline;
use super::{text_decode, ParseError, ParseOptions};
use crate::rag::document::{ParsedDocument, SectionKind};

pub(super) fn parse(bytes: &[u8], options: &ParseOptions) -> Result<ParsedDocument, ParseError> {
    let text = text_decode::decode(bytes)?;
    let lines: Vec<&str> = text.lines().collect();
    let mut images = ImageCollector::new(options);
    let mut outline = Outline::default();
    let mut paragraph: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(fence) = Fence::opening(line) {
            flush_paragraph(&mut outline, &mut paragraph, &mut images);
            let end = (i + 1..lines.len())
                .find(|&j| fence.is_closed_by(lines[j]))
                .unwrap_or(lines.len() - 1);
            outline.push(SectionKind::Code, &lines[i..=end].join("\n"));
            i = end + 1;
        } else if let Some((level, heading)) = atx_heading(line) {
            flush_paragraph(&mut outline, &mut paragraph, &mut images);
            let heading = without_images(heading, &mut images, &outline);
            outline.heading(level, &heading);
            i += 1;
        } else if let Some(level) = setext_level(line).filter(|_| !paragraph.is_empty()) {
            let heading = without_images(&paragraph.join(" "), &mut images, &outline);
            outline.heading(level, &heading);
            paragraph.clear();
            i += 1;
        } else if starts_table(&lines[i..]) {
            flush_paragraph(&mut outline, &mut paragraph, &mut images);
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].trim().is_empty() || !lines[j].contains('|'))
                .unwrap_or(lines.len());
            let table = without_images(&lines[i..end].join("\n"), &mut images, &outline);
            outline.push(SectionKind::Table, &table);
            i = end;
        } else if line.trim().is_empty() || is_thematic_break(line) {
            flush_paragraph(&mut outline, &mut paragraph, &mut images);
            i += 1;
        } else {
            paragraph.push(line);
            i += 1;
        }
    }
    flush_paragraph(&mut outline, &mut paragraph, &mut images);
    Ok(ParsedDocument {
        sections: outline.into_sections()?,
        images: images.into_images(),
        ..ParsedDocument::default()
    })
}

fn flush_paragraph(outline: &mut Outline, paragraph: &mut Vec<&str>, images: &mut ImageCollector<'_>) {
    if !paragraph.is_empty() {
        let text = without_images(&paragraph.join("\n"), images, outline);
        outline.push(SectionKind::Paragraph, &text);
        paragraph.clear();
    }
}

/// A line with its indentation of at most three spaces removed, as CommonMark allows for blocks.
fn block_content(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    (indent <= 3).then(|| &line[indent..])
}

struct Fence {
    marker: char,
    length: usize,
}

impl Fence {
    fn opening(line: &str) -> Option<Fence> {
        let content = block_content(line)?;
        let marker = content.chars().next().filter(|c| matches!(c, '`' | '~'))?;
        let length = content.len() - content.trim_start_matches(marker).len();
        let info = &content[length..];
        // A backtick fence's info string cannot contain backticks, or it would be inline code.
        (length >= 3 && !(marker == '`' && info.contains('`'))).then_some(Fence { marker, length })
    }

    fn is_closed_by(&self, line: &str) -> bool {
        let Some(content) = block_content(line) else {
            return false;
        };
        let rest = content.trim_start_matches(self.marker);
        content.len() - rest.len() >= self.length && rest.trim().is_empty()
    }
}

fn atx_heading(line: &str) -> Option<(u8, &str)> {
    let content = block_content(line)?;
    let rest = content.trim_start_matches('#');
    let level = content.len() - rest.len();
    if !(1..=6).contains(&level) || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let text = rest.trim();
    let without_closing = text.trim_end_matches('#');
    let text = if without_closing.is_empty() || without_closing.ends_with([' ', '\t']) {
        without_closing.trim_end()
    } else {
        text
    };
    u8::try_from(level).ok().map(|level| (level, text))
}

fn setext_level(line: &str) -> Option<u8> {
    let content = block_content(line)?.trim_end();
    if content.is_empty() {
        None
    } else if content.chars().all(|c| c == '=') {
        Some(1)
    } else if content.chars().all(|c| c == '-') {
        Some(2)
    } else {
        None
    }
}

fn is_thematic_break(line: &str) -> bool {
    let Some(content) = block_content(line) else {
        return false;
    };
    let marks: String = content.chars().filter(|c| !c.is_whitespace()).collect();
    marks.len() >= 3
        && ["*", "-", "_"]
            .iter()
            .any(|mark| marks.chars().all(|c| mark.starts_with(c)))
}

/// A GFM table (a row followed by a delimiter row such as `|---|:--:|`), or a row written
/// between pipes.
fn starts_table(lines: &[&str]) -> bool {
    let Some(first) = lines.first().map(|line| line.trim()) else {
        return false;
    };
    if !first.contains('|') {
        return false;
    }
    let piped = first.len() > 1 && first.starts_with('|') && first.ends_with('|');
    piped || lines.get(1).is_some_and(|next| is_delimiter_row(next))
}

fn is_delimiter_row(line: &str) -> bool {
    let row = line.trim().trim_start_matches('|').trim_end_matches('|');
    !row.is_empty()
        && row.split('|').all(|cell| {
            let cell = cell.trim().trim_start_matches(':').trim_end_matches(':');
            !cell.is_empty() && cell.chars().all(|c| c == '-')
        })
}

/// Replaces `![alt](target)` and `![alt][ref]` by `alt`: the alt text is what the image says in
/// words, and images are never fetched. One whose target is a `data:` URI goes to `images`,
/// placed under the outline's current heading.
fn without_images(text: &str, images: &mut ImageCollector<'_>, outline: &Outline) -> String {
    let mut out = String::with_capacity(text.len());
    let mut ends = ImageEnds::default();
    let mut pos = 0;
    while let Some(found) = text[pos..].find("![") {
        let after = pos + found + 2;
        out.push_str(&text[pos..after - 2]);
        match ends.of(text, after) {
            Some((alt_end, end)) => {
                let alt = &text[after..alt_end];
                if let Some((bytes, mime)) = text.get(alt_end + 2..end - 1).and_then(|t| embedded(t, images)) {
                    let place = ImagePlace {
                        page: None,
                        caption: Some(alt.trim().to_owned()),
                        section_title: outline.title(),
                    };
                    images.add(bytes, &mime, place);
                }
                out.push_str(alt);
                pos = end;
            }
            None => {
                out.push_str("![");
                pos = after;
            }
        }
    }
    out.push_str(&text[pos..]);
    out
}

/// The image a `(target)` holds as a base64 `data:` URI of an image type, when `images` still
/// wants one and it fits (judged from the encoded length before decoding).
fn embedded(target: &str, images: &ImageCollector<'_>) -> Option<(Vec<u8>, String)> {
    if !images.wants_more() {
        return None;
    }
    let uri = target.trim_start_matches('(').split_whitespace().next()?;
    let (meta, data) = uri.strip_prefix("data:")?.split_once(',')?;
    let mime = meta.strip_suffix(";base64")?;
    if !mime.starts_with("image/") || !images.fits(data.len() / 4 * 3) {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(data).ok()?;
    Some((bytes, mime.to_owned()))
}

/// Where the images starting at growing positions end. Each bracket is looked for from where
/// the last search of its kind left off: searched from every `![` anew, a line of `![`
/// repeated read the rest of the text once per `![` (hours for a 10 MiB file).
struct ImageEnds {
    alt: Next,
    paren: Next,
    bracket: Next,
}

impl Default for ImageEnds {
    fn default() -> Self {
        Self {
            alt: Next::of(']'),
            paren: Next::of(')'),
            bracket: Next::of(']'),
        }
    }
}

impl ImageEnds {
    /// For the image whose `![` ends at `after`: where its alt text ends and where it ends.
    fn of(&mut self, text: &str, after: usize) -> Option<(usize, usize)> {
        let alt_end = self.alt.at_or_after(text, after)?;
        let target = match text[alt_end + 1..].chars().next()? {
            '(' => &mut self.paren,
            '[' => &mut self.bracket,
            _ => return None,
        };
        let target_end = target.at_or_after(text, alt_end + 2)?;
        Some((alt_end, target_end + 1))
    }
}

/// The next `c` at or after positions that never decrease, each part of the text read once.
struct Next {
    c: char,
    /// The last answer: the position found, or `Some(None)` when the rest held none.
    found: Option<Option<usize>>,
}

impl Next {
    fn of(c: char) -> Self {
        Self { c, found: None }
    }

    fn at_or_after(&mut self, text: &str, from: usize) -> Option<usize> {
        match self.found {
            Some(Some(at)) if at >= from => Some(at),
            Some(None) => None,
            _ => {
                let at = text.get(from..)?.find(self.c).map(|i| from + i);
                self.found = Some(at);
                at
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::document::Section;

    fn plain(text: &str) -> String {
        let options = ParseOptions::default();
        without_images(text, &mut ImageCollector::new(&options), &Outline::default())
    }

    fn sections(source: &str) -> Vec<Section> {
        parse(source.as_bytes(), &ParseOptions::default()).unwrap().sections
    }

    #[test]
    fn embedded_images_are_kept_when_asked_within_the_limits() {
        let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG pixels");
        let source = format!(
            "# Plans\n\nThe floor ![Ground floor](data:image/png;base64,{png}) and \
             ![linked](https://example.com/x.png) and ![text](data:text/plain;base64,aGk=).\n\n\
             ## Roof\n\n![Roof](data:image/jpeg;base64,{png} \"title\")\n"
        );
        let asked = ParseOptions {
            save_images: true,
            ..ParseOptions::default()
        };
        let doc = parse(source.as_bytes(), &asked).unwrap();
        let got: Vec<_> = doc
            .images
            .iter()
            .map(|i| {
                (
                    i.index,
                    i.mime.as_str(),
                    i.caption.as_deref(),
                    i.section_title.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, "image/png", Some("Ground floor"), Some("Plans")),
                (1, "image/jpeg", Some("Roof"), Some("Plans > Roof")),
            ]
        );
        assert_eq!(doc.images[0].bytes, b"\x89PNG pixels");
        assert_eq!(doc.sections[1].text, "The floor Ground floor and linked and text.");
        // Not asked, or past the limits: none kept, the text the same.
        let plain_doc = parse(source.as_bytes(), &ParseOptions::default()).unwrap();
        assert!(plain_doc.images.is_empty());
        assert_eq!(plain_doc.sections, doc.sections);
        let small = ParseOptions {
            max_image_bytes: 4,
            ..asked.clone()
        };
        assert!(parse(source.as_bytes(), &small).unwrap().images.is_empty());
        let one = ParseOptions {
            max_image_count: 1,
            ..asked
        };
        assert_eq!(parse(source.as_bytes(), &one).unwrap().images.len(), 1);
    }

    #[test]
    fn headings_set_the_title_path() {
        let source =
            "Intro text.\n\n# Install\n\nGet it.\n\n## Linux ##\n\nUse apt.\n\n## Mac\nUse brew.\n\n# Use\n\nRun it.";
        let got: Vec<_> = sections(source)
            .into_iter()
            .map(|s| (s.kind, s.text, s.title))
            .collect();
        let p = SectionKind::Paragraph;
        let h = SectionKind::Heading;
        let expected = [
            (p, "Intro text.", None),
            (h, "Install", Some("Install")),
            (p, "Get it.", Some("Install")),
            (h, "Linux", Some("Install > Linux")),
            (p, "Use apt.", Some("Install > Linux")),
            (h, "Mac", Some("Install > Mac")),
            (p, "Use brew.", Some("Install > Mac")),
            (h, "Use", Some("Use")),
            (p, "Run it.", Some("Use")),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(k, t, h)| (*k, t.to_string(), h.map(str::to_owned)))
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn setext_headings_and_thematic_breaks() {
        let got = sections("Title\n=====\n\nBody\n\n---\n\nSub\n---\nMore");
        let got: Vec<_> = got.iter().map(|s| (s.kind, s.text.as_str())).collect();
        assert_eq!(
            got,
            [
                (SectionKind::Heading, "Title"),
                (SectionKind::Paragraph, "Body"),
                (SectionKind::Heading, "Sub"),
                (SectionKind::Paragraph, "More"),
            ]
        );
    }

    #[test]
    fn fenced_code_is_kept_whole() {
        let code = "```rust\nfn main() {\n\n    // # not a heading\n    println!(\"| a | b |\");\n}\n```";
        let source = format!("# Code\n\nBefore.\n\n{code}\n\nAfter.");
        let got = sections(&source);
        assert_eq!(got[2].kind, SectionKind::Code);
        assert_eq!(got[2].text, code);
        assert_eq!(got[2].title.as_deref(), Some("Code"));
        assert_eq!(got[3].text, "After.");
    }

    #[test]
    fn an_unclosed_fence_runs_to_the_end() {
        let got = sections("~~~\nopen\n\nstill code");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text, "~~~\nopen\n\nstill code");
    }

    #[test]
    fn tables_become_table_sections() {
        let table = "| Name | Age |\n|------|----:|\n| Ann | 31 |\n| Bob | 42 |";
        let got = sections(&format!("Before\n\n{table}\nAfter"));
        assert_eq!(got[1].kind, SectionKind::Table);
        assert_eq!(got[1].text, table);
        assert_eq!(got[2].text, "After");

        let without_outer_pipes = "a | b\n--|:-:\n1 | 2";
        let got = sections(without_outer_pipes);
        assert_eq!(got[0].kind, SectionKind::Table);
        assert_eq!(got[0].text, without_outer_pipes);
    }

    #[test]
    fn images_leave_their_alt_text() {
        let got = sections(
            "See ![the login page](img/login.png \"Login\") and ![logo][ref], not [a link](x.html) or ![broken.",
        );
        assert_eq!(
            got[0].text,
            "See the login page and logo, not [a link](x.html) or ![broken."
        );
        assert_eq!(plain("![a](x) ![b] (y) ![c][r] ![d](z ![e](w)"), "a ![b] (y) c d");
    }

    /// A megabyte of `![` with one bracket at the end: read once per `![` before, about 10^11
    /// bytes.
    #[test]
    fn image_syntax_is_found_in_one_pass() {
        for tail in ["", "]", "](", "][", "](x)"] {
            let text = format!("{}{tail}", "![".repeat(500_000));
            let got = plain(&text);
            assert_eq!(got.len(), text.len() - if tail == "](x)" { 6 } else { 0 }, "{tail:?}");
        }
    }

    #[test]
    fn paragraphs_keep_their_lines() {
        let got = sections("- one\n- two\n\n   indented text\nnext line");
        assert_eq!(got[0].text, "- one\n- two");
        assert_eq!(got[1].text, "indented text\nnext line");
    }
}
