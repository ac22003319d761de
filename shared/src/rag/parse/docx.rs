//! Word documents (.docx): the body of `word/document.xml` with its headings, paragraphs and tables,
//! and the images it embeds.
//!
//! Headers, footers, footnotes, comments and list numbering are not read; deleted tracked changes
//! and field codes are left out, as Word does when it shows the document.

use std::collections::HashMap;

use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{Namespace, ResolveResult};
use quick_xml::{NsReader, XmlVersion};
use zip::result::ZipError;

use super::image_collector::{ImageCollector, ImagePlace};
use super::limits::{self, Limits};
use super::outline::Outline;
use super::zip_entries::{Entry, ZipEntries};
use super::{ParseError, ParseOptions};
use crate::rag::document::{ParsedDocument, SectionKind};

/// Unpacked size above which an XML part is refused: far beyond any real document's text. All
/// parts together are held to [`super::limits::MAX_UNPACKED_BYTES`] as well.
const MAX_XML_BYTES: usize = 200 * 1024 * 1024;

const DOCUMENT_PART: &str = "word/document.xml";

pub(super) fn parse(bytes: &[u8], options: &ParseOptions) -> Result<ParsedDocument, ParseError> {
    parse_within(bytes, options, &Limits::DOCUMENT)
}

fn parse_within(bytes: &[u8], options: &ParseOptions, limits: &Limits) -> Result<ParsedDocument, ParseError> {
    let mut entries = ZipEntries::with_budget(bytes, limits.unpacked()).map_err(invalid)?;
    let document = match entries.read(DOCUMENT_PART, MAX_XML_BYTES).map_err(invalid)? {
        Entry::Bytes(bytes) => bytes,
        Entry::Missing => {
            return Err(ParseError::new(
                "not a valid docx file: it has no word/document.xml (is it a Word document?)",
            ))
        }
        Entry::TooLarge => {
            return Err(ParseError(format!(
                "the docx file's text is too large to index: its {DOCUMENT_PART} unpacks to more than {}",
                limits::amount(MAX_XML_BYTES.min(limits.unpacked_bytes))
            )))
        }
    };
    // Without styles.xml the built-in style ids still mark headings, so a broken one is not fatal.
    let styles = match entries.read("word/styles.xml", MAX_XML_BYTES) {
        Ok(Entry::Bytes(bytes)) => heading_styles(&String::from_utf8_lossy(&bytes)).unwrap_or_default(),
        _ => HashMap::new(),
    };
    // A body may name pictures far more often than a base keeps them (the same one thousands
    // of times, each with a caption): references past a few per wanted image are not kept, and
    // pictures that turn out unreadable or too large leave room for the ones after them.
    let image_slots = match options.save_images {
        true => options.max_image_count.saturating_mul(4),
        false => 0,
    };
    let body = Body::read(&String::from_utf8_lossy(&document), &styles, limits, image_slots)
        .map_err(|err| ParseError(format!("not a valid docx file: broken XML in {DOCUMENT_PART}: {err}")))?;

    let mut images = ImageCollector::new(options);
    if images.wants_more() && !body.images.is_empty() {
        let targets = match entries.read("word/_rels/document.xml.rels", MAX_XML_BYTES) {
            Ok(Entry::Bytes(bytes)) => image_targets(&String::from_utf8_lossy(&bytes)).unwrap_or_default(),
            _ => HashMap::new(),
        };
        for image in body.images {
            if !images.wants_more() {
                break;
            }
            let Some(path) = targets.get(&image.relationship) else {
                continue;
            };
            let Some(mime) = image_mime(path) else {
                continue;
            };
            // One unreadable picture should not cost the document its text.
            if let Ok(Entry::Bytes(bytes)) = entries.read(path, options.max_image_bytes) {
                images.add(bytes, &mime, image.place);
            }
        }
    }
    Ok(ParsedDocument {
        sections: body.outline.into_sections()?,
        images: images.into_images(),
        page_count: None,
    })
}

fn invalid(err: ZipError) -> ParseError {
    ParseError(format!("not a valid docx file: {err}"))
}

/// The XML vocabularies the reader understands, in their transitional and strict namespaces.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Vocabulary {
    Word,
    WordDrawing,
    Drawing,
    MarkupCompatibility,
}

fn vocabulary(namespace: &ResolveResult) -> Option<Vocabulary> {
    let ResolveResult::Bound(Namespace(uri)) = namespace else {
        return None;
    };
    match *uri {
        "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
        | "http://purl.oclc.org/ooxml/wordprocessingml/main" => Some(Vocabulary::Word),
        "http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"
        | "http://purl.oclc.org/ooxml/drawingml/wordprocessingDrawing" => Some(Vocabulary::WordDrawing),
        "http://schemas.openxmlformats.org/drawingml/2006/main" | "http://purl.oclc.org/ooxml/drawingml/main" => {
            Some(Vocabulary::Drawing)
        }
        "http://schemas.openxmlformats.org/markup-compatibility/2006" => Some(Vocabulary::MarkupCompatibility),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tag {
    Paragraph,
    ParagraphStyle,
    OutlineLevel,
    Run,
    Text,
    Tab,
    Break,
    NoBreakHyphen,
    Table,
    Row,
    Cell,
    Drawing,
    DrawingProperties,
    Blip,
    /// `mc:Fallback` repeats the content of the `mc:Choice` before it for older readers.
    Fallback,
    /// Text moved with changes tracked, at its old place (`w:moveTo` holds it at the new one).
    MoveFrom,
    /// Hidden text: a run property.
    Vanish,
    /// A run's or a paragraph's properties before a tracked change: not how it reads now.
    PropertiesChange,
}

fn tag(namespace: &ResolveResult, local_name: &str) -> Option<Tag> {
    match (vocabulary(namespace)?, local_name) {
        (Vocabulary::Word, "p") => Some(Tag::Paragraph),
        (Vocabulary::Word, "pStyle") => Some(Tag::ParagraphStyle),
        (Vocabulary::Word, "outlineLvl") => Some(Tag::OutlineLevel),
        (Vocabulary::Word, "r") => Some(Tag::Run),
        (Vocabulary::Word, "t") => Some(Tag::Text),
        (Vocabulary::Word, "tab") => Some(Tag::Tab),
        (Vocabulary::Word, "br" | "cr") => Some(Tag::Break),
        (Vocabulary::Word, "noBreakHyphen") => Some(Tag::NoBreakHyphen),
        (Vocabulary::Word, "tbl") => Some(Tag::Table),
        (Vocabulary::Word, "tr") => Some(Tag::Row),
        (Vocabulary::Word, "tc") => Some(Tag::Cell),
        (Vocabulary::Word, "drawing") => Some(Tag::Drawing),
        (Vocabulary::WordDrawing, "docPr") => Some(Tag::DrawingProperties),
        (Vocabulary::Drawing, "blip") => Some(Tag::Blip),
        (Vocabulary::MarkupCompatibility, "Fallback") => Some(Tag::Fallback),
        (Vocabulary::Word, "moveFrom") => Some(Tag::MoveFrom),
        (Vocabulary::Word, "vanish") => Some(Tag::Vanish),
        (Vocabulary::Word, "rPrChange" | "pPrChange") => Some(Tag::PropertiesChange),
        _ => None,
    }
}

/// The value of the attribute with this local name, whatever its prefix.
fn attribute(element: &BytesStart, local_name: &str) -> Option<String> {
    element
        .attributes()
        .flatten()
        .find(|attribute| attribute.key.local_name().as_ref() == local_name)
        .and_then(|attribute| {
            attribute
                .normalized_value(XmlVersion::Implicit1_0)
                .ok()
                .map(|value| value.into_owned())
        })
}

/// Heading level of a built-in style id; the title sits above every heading.
fn built_in_heading_level(style_id: &str) -> Option<u8> {
    let lower = style_id.to_ascii_lowercase();
    if lower == "title" {
        return Some(0);
    }
    let digits = lower.strip_prefix("heading")?.trim_start();
    digits.parse::<u8>().ok().filter(|level| (1..=9).contains(level))
}

/// Style id -> heading level, from the style names in `word/styles.xml`. Localised Word versions
/// give heading styles ids such as "berschrift1" but keep the name "heading 1".
fn heading_styles(xml: &str) -> Result<HashMap<String, u8>, quick_xml::Error> {
    let mut reader = NsReader::from_str(xml);
    reader.config_mut().expand_empty_elements = true;
    let mut styles = HashMap::new();
    let mut current: Option<(String, Option<u8>)> = None;
    loop {
        match reader.read_resolved_event()? {
            (namespace, Event::Start(element)) if vocabulary(&namespace) == Some(Vocabulary::Word) => {
                match element.local_name().as_ref() {
                    "style" => current = attribute(&element, "styleId").map(|id| (id, None)),
                    "name" => {
                        if let Some((_, level)) = current.as_mut() {
                            *level = attribute(&element, "val").and_then(|name| built_in_heading_level(&name));
                        }
                    }
                    "outlineLvl" => {
                        if let Some((_, level @ None)) = current.as_mut() {
                            *level = attribute(&element, "val").and_then(|value| outline_heading_level(&value));
                        }
                    }
                    _ => {}
                }
            }
            (namespace, Event::End(element))
                if vocabulary(&namespace) == Some(Vocabulary::Word) && element.local_name().as_ref() == "style" =>
            {
                if let Some((id, Some(level))) = current.take() {
                    styles.insert(id, level);
                }
            }
            (_, Event::Eof) => return Ok(styles),
            _ => {}
        }
    }
}

/// `w:outlineLvl` counts from 0; 9 means body text.
fn outline_heading_level(value: &str) -> Option<u8> {
    value
        .parse::<u8>()
        .ok()
        .filter(|level| *level < 9)
        .map(|level| level + 1)
}

/// Relationship id -> zip path of each image the document part links to inside the package.
fn image_targets(xml: &str) -> Result<HashMap<String, String>, quick_xml::Error> {
    let mut reader = NsReader::from_str(xml);
    let mut targets = HashMap::new();
    loop {
        match reader.read_resolved_event()? {
            (_, Event::Start(element) | Event::Empty(element)) if element.local_name().as_ref() == "Relationship" => {
                let external = attribute(&element, "TargetMode").is_some_and(|mode| mode == "External");
                if let (false, Some(id), Some(target)) =
                    (external, attribute(&element, "Id"), attribute(&element, "Target"))
                {
                    targets.insert(id, part_path(&target));
                }
            }
            (_, Event::Eof) => return Ok(targets),
            _ => {}
        }
    }
}

/// A relationship target is relative to `word/` unless it starts with '/'.
fn part_path(target: &str) -> String {
    let joined = match target.strip_prefix('/') {
        Some(absolute) => absolute.to_owned(),
        None => format!("word/{target}"),
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    parts.join("/")
}

fn image_mime(path: &str) -> Option<String> {
    mime_guess::from_path(path)
        .first()
        .filter(|mime| mime.type_() == mime_guess::mime::IMAGE)
        .map(|mime| mime.essence_str().to_owned())
}

/// An image the body refers to, in document order.
struct ImageReference {
    relationship: String,
    place: ImagePlace,
}

#[derive(Default)]
struct Paragraph {
    text: String,
    heading_level: Option<u8>,
}

#[derive(Default)]
struct Table {
    rows: Vec<String>,
    cells: Vec<String>,
    cell: String,
}

struct Body {
    outline: Outline,
    images: Vec<ImageReference>,
}

/// Tables nested deeper than this are read as text of the cell that holds them: each level
/// copies its text into the level above when it closes, so a document nested thousands deep
/// would cost time quadratic in its size.
const MAX_TABLE_DEPTH: usize = 5;

/// Characters an image's caption or section title keeps: an attribute can be megabytes long.
const MAX_LABEL_CHARS: usize = 1_000;

fn label(text: String) -> String {
    match text.char_indices().nth(MAX_LABEL_CHARS) {
        Some((end, _)) => text[..end].to_owned(),
        None => text,
    }
}

/// The reader's position in `word/document.xml`.
struct BodyReader<'a> {
    styles: &'a HashMap<String, u8>,
    body: Body,
    /// Open paragraphs, innermost last: a text box puts paragraphs inside a paragraph.
    paragraphs: Vec<Paragraph>,
    /// Open tables, innermost last, up to `MAX_TABLE_DEPTH`.
    tables: Vec<Table>,
    /// Open tables at any depth.
    table_depth: usize,
    /// Image references still kept.
    image_slots: usize,
    run_depth: usize,
    /// The open run is hidden text (`w:vanish`), which no reader of the document sees.
    run_hidden: bool,
    in_text: bool,
    /// Depth inside an element whose content is skipped.
    skip_depth: usize,
    caption: Option<String>,
}

impl Body {
    fn read(
        xml: &str,
        styles: &HashMap<String, u8>,
        limits: &Limits,
        image_slots: usize,
    ) -> Result<Body, quick_xml::Error> {
        let mut reader = NsReader::from_str(xml);
        reader.config_mut().expand_empty_elements = true;
        let mut state = BodyReader {
            styles,
            body: Body {
                outline: Outline::with_budget(limits.text()),
                images: Vec::new(),
            },
            paragraphs: Vec::new(),
            tables: Vec::new(),
            table_depth: 0,
            image_slots,
            run_depth: 0,
            run_hidden: false,
            in_text: false,
            skip_depth: 0,
            caption: None,
        };
        loop {
            match reader.read_resolved_event()? {
                (namespace, Event::Start(element)) => {
                    let tag = tag(&namespace, element.local_name().as_ref());
                    state.start(tag, &element);
                }
                (namespace, Event::End(element)) => state.end(tag(&namespace, element.local_name().as_ref())),
                (_, Event::Text(text)) => state.text(&text.xml10_content()),
                (_, Event::GeneralRef(reference)) => {
                    let resolved = match reference.resolve_char_ref()? {
                        Some(c) => Some(c.to_string()),
                        None => resolve_predefined_entity(&reference.xml10_content()).map(str::to_owned),
                    };
                    if let Some(resolved) = resolved {
                        state.text(&resolved);
                    }
                }
                (_, Event::Eof) => return Ok(state.body),
                _ => {}
            }
        }
    }
}

impl BodyReader<'_> {
    /// The innermost open table, when it is one read as a table.
    fn kept_table(&mut self) -> Option<&mut Table> {
        match self.table_depth <= MAX_TABLE_DEPTH {
            true => self.tables.last_mut(),
            false => None,
        }
    }

    fn start(&mut self, tag: Option<Tag>, element: &BytesStart) {
        if self.skip_depth > 0 || matches!(tag, Some(Tag::Fallback | Tag::MoveFrom | Tag::PropertiesChange)) {
            self.skip_depth += 1;
            return;
        }
        let in_run = self.run_depth > 0;
        match tag {
            Some(Tag::Paragraph) => self.paragraphs.push(Paragraph::default()),
            Some(Tag::ParagraphStyle) => {
                let level = attribute(element, "val")
                    .and_then(|id| self.styles.get(&id).copied().or_else(|| built_in_heading_level(&id)));
                if let (Some(paragraph), Some(level)) = (self.paragraphs.last_mut(), level) {
                    paragraph.heading_level = Some(level);
                }
            }
            Some(Tag::OutlineLevel) => {
                let level = attribute(element, "val").and_then(|value| outline_heading_level(&value));
                if let (Some(paragraph), Some(level)) = (self.paragraphs.last_mut(), level) {
                    paragraph.heading_level = Some(level);
                }
            }
            Some(Tag::Run) => {
                self.run_depth += 1;
                self.run_hidden = false;
            }
            // Outside a run it hides a paragraph's mark only.
            Some(Tag::Vanish) if in_run => {
                self.run_hidden = !matches!(attribute(element, "val").as_deref(), Some("false" | "0" | "off"));
            }
            Some(Tag::Text) => self.in_text = true,
            // Outside a run these elements define tab stops and layout, not content.
            Some(Tag::Tab) if in_run => self.push_text("\t"),
            Some(Tag::Break) if in_run => self.push_text("\n"),
            Some(Tag::NoBreakHyphen) if in_run => self.push_text("-"),
            Some(Tag::Table) => {
                self.table_depth += 1;
                if self.table_depth <= MAX_TABLE_DEPTH {
                    self.tables.push(Table::default());
                }
            }
            Some(Tag::Row) => {
                if let Some(table) = self.kept_table() {
                    table.cells.clear();
                }
            }
            Some(Tag::Cell) => {
                if let Some(table) = self.kept_table() {
                    table.cell.clear();
                }
            }
            Some(Tag::DrawingProperties) => {
                self.caption = attribute(element, "descr")
                    .or_else(|| attribute(element, "title"))
                    .map(label);
            }
            Some(Tag::Blip) if self.body.images.len() < self.image_slots => {
                if let Some(relationship) = attribute(element, "embed") {
                    self.body.images.push(ImageReference {
                        relationship,
                        place: ImagePlace {
                            page: None,
                            caption: self.caption.clone(),
                            section_title: self.body.outline.title().map(label),
                        },
                    });
                }
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: Option<Tag>) {
        if self.skip_depth > 0 {
            self.skip_depth -= 1;
            return;
        }
        match tag {
            Some(Tag::Paragraph) => {
                if let Some(paragraph) = self.paragraphs.pop() {
                    self.finish_paragraph(paragraph);
                }
            }
            Some(Tag::Run) => self.run_depth = self.run_depth.saturating_sub(1),
            Some(Tag::Text) => self.in_text = false,
            Some(Tag::Cell) => {
                if let Some(table) = self.kept_table() {
                    let cell = std::mem::take(&mut table.cell);
                    table.cells.push(cell.trim().to_owned());
                }
            }
            Some(Tag::Row) => {
                if let Some(table) = self.kept_table() {
                    if table.cells.iter().any(|cell| !cell.is_empty()) {
                        table.rows.push(table.cells.join(" | "));
                    }
                    table.cells.clear();
                }
            }
            Some(Tag::Table) => {
                let kept = self.table_depth <= MAX_TABLE_DEPTH;
                self.table_depth = self.table_depth.saturating_sub(1);
                // A deeper table left its paragraphs in the cell of the last kept one.
                if !kept {
                    return;
                }
                if let Some(table) = self.tables.pop() {
                    match self.tables.last_mut() {
                        // A table nested in a cell becomes part of that cell's text.
                        Some(outer) => append_to_cell(&mut outer.cell, &table.rows.join("; ")),
                        None => self.body.outline.push(SectionKind::Table, &table.rows.join("\n")),
                    }
                }
            }
            Some(Tag::Drawing) => self.caption = None,
            _ => {}
        }
    }

    fn text(&mut self, text: &str) {
        if self.in_text && self.skip_depth == 0 && !self.run_hidden {
            self.push_text(text);
        }
    }

    fn push_text(&mut self, text: &str) {
        if let Some(paragraph) = self.paragraphs.last_mut() {
            paragraph.text.push_str(text);
        }
    }

    fn finish_paragraph(&mut self, paragraph: Paragraph) {
        if let Some(table) = self.tables.last_mut() {
            // A row is one line of the table section.
            let text = paragraph.text.split_whitespace().collect::<Vec<_>>().join(" ");
            append_to_cell(&mut table.cell, &text);
        } else if let Some(level) = paragraph.heading_level {
            self.body.outline.heading(level, &paragraph.text);
        } else {
            self.body.outline.push(SectionKind::Paragraph, &paragraph.text);
        }
    }
}

fn append_to_cell(cell: &mut String, text: &str) {
    if text.is_empty() {
        return;
    }
    if !cell.is_empty() {
        cell.push(' ');
    }
    cell.push_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::parse::fixtures::{self, DocxBlock};

    fn options_with_images() -> ParseOptions {
        ParseOptions {
            save_images: true,
            ..ParseOptions::default()
        }
    }

    #[test]
    fn paragraphs_headings_and_tables_are_read() {
        let bytes = fixtures::docx(&[
            DocxBlock::Title("Handbook"),
            DocxBlock::Paragraph("Welcome & <hello>."),
            DocxBlock::Heading(1, "Install"),
            DocxBlock::Paragraph("Name:\tvalue\nsecond line"),
            DocxBlock::Heading(2, "Linux"),
            DocxBlock::Table(vec![
                vec!["OS", "Command"],
                vec!["Debian", "apt install x"],
                vec!["", ""],
            ]),
            DocxBlock::Heading(1, "Use"),
            DocxBlock::Paragraph("Run it."),
        ]);
        let document = parse(&bytes, &ParseOptions::default()).unwrap();
        let got: Vec<_> = document
            .sections
            .iter()
            .map(|s| (s.kind, s.text.as_str(), s.title.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (SectionKind::Heading, "Handbook", Some("Handbook")),
                (SectionKind::Paragraph, "Welcome & <hello>.", Some("Handbook")),
                (SectionKind::Heading, "Install", Some("Handbook > Install")),
                (
                    SectionKind::Paragraph,
                    "Name:\tvalue\nsecond line",
                    Some("Handbook > Install")
                ),
                (SectionKind::Heading, "Linux", Some("Handbook > Install > Linux")),
                (
                    SectionKind::Table,
                    "OS | Command\nDebian | apt install x",
                    Some("Handbook > Install > Linux")
                ),
                (SectionKind::Heading, "Use", Some("Handbook > Use")),
                (SectionKind::Paragraph, "Run it.", Some("Handbook > Use")),
            ]
        );
        assert!(document.images.is_empty());
    }

    #[test]
    fn embedded_images_are_extracted_in_order() {
        let png = fixtures::png();
        let bytes = fixtures::docx(&[
            DocxBlock::Paragraph("Intro"),
            DocxBlock::Image {
                bytes: &png,
                description: Some("The login page"),
            },
            DocxBlock::Heading(1, "Details"),
            DocxBlock::Image {
                bytes: b"second image",
                description: None,
            },
        ]);
        let document = parse(&bytes, &options_with_images()).unwrap();
        assert_eq!(document.images.len(), 2);
        let first = &document.images[0];
        assert_eq!(first.bytes, png);
        assert_eq!(first.mime, "image/png");
        assert_eq!(first.index, 0);
        assert_eq!(first.caption.as_deref(), Some("The login page"));
        assert_eq!(first.section_title, None);
        let second = &document.images[1];
        assert_eq!(second.bytes, b"second image");
        assert_eq!((second.index, second.caption.as_deref()), (1, None));
        assert_eq!(second.section_title.as_deref(), Some("Details"));

        let limited = ParseOptions {
            max_image_bytes: png.len() - 1,
            ..options_with_images()
        };
        let document = parse(&bytes, &limited).unwrap();
        assert_eq!(document.images.len(), 1);
        assert_eq!(document.images[0].bytes, b"second image");

        let one = ParseOptions {
            max_image_count: 1,
            ..options_with_images()
        };
        assert_eq!(parse(&bytes, &one).unwrap().images.len(), 1);
        assert!(parse(&bytes, &ParseOptions::default()).unwrap().images.is_empty());
    }

    /// A `word/document.xml` whose body is `body`.
    fn document_xml(body: &str) -> String {
        format!(
            r#"<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"><w:body>{body}</w:body></w:document>"#
        )
    }

    fn docx_with_body(body: &str) -> Vec<u8> {
        let base = fixtures::docx(&[DocxBlock::Paragraph("placeholder")]);
        fixtures::with_zip_entry(&base, DOCUMENT_PART, document_xml(body).as_bytes())
    }

    #[test]
    fn pictures_named_over_and_over_keep_a_few_short_references() {
        let caption = "c".repeat(100_000);
        let blips = r#"<a:blip r:embed="rIdImage1"/>"#.repeat(1_000);
        let body = format!(
            r#"<w:p><w:r><w:t>Text</w:t></w:r></w:p><w:p><w:r><wp:docPr id="1" descr="{caption}"/>{blips}</w:r></w:p>"#
        );
        let xml = document_xml(&body);
        let read = |slots| Body::read(&xml, &HashMap::new(), &Limits::DOCUMENT, slots).unwrap();
        let read_body = read(8);
        assert_eq!(read_body.images.len(), 8);
        let caption = read_body.images[0].place.caption.as_deref().unwrap();
        assert_eq!(caption.chars().count(), MAX_LABEL_CHARS);
        assert!(read(0).images.is_empty(), "no references when no images are wanted");
        // The text is read all the same.
        let document = parse(&docx_with_body(&body), &options_with_images()).unwrap();
        assert_eq!(document.sections[0].text, "Text");
    }

    #[test]
    fn tables_nested_past_the_depth_limit_are_read_as_their_cells_text() {
        let depth = 12;
        let mut body = String::new();
        for level in 1..=depth {
            body.push_str(&format!("<w:tbl><w:tr><w:tc><w:p><w:r><w:t>L{level}</w:t></w:r></w:p>"));
        }
        for _ in 1..=depth {
            body.push_str("</w:tc><w:tc><w:p><w:r><w:t>x</w:t></w:r></w:p></w:tc></w:tr></w:tbl>");
        }
        let document = parse(&docx_with_body(&body), &ParseOptions::default()).unwrap();
        assert_eq!(document.sections.len(), 1);
        let text = &document.sections[0].text;
        // Kept tables join their cells with " | "; past the limit, cells' text runs on in the
        // cell of the deepest kept table, nothing lost.
        let kept: String = (1..=MAX_TABLE_DEPTH).map(|l| format!("L{l} ")).collect();
        assert!(text.starts_with(&kept), "{text}");
        for level in 1..=depth {
            assert!(text.contains(&format!("L{level}")), "L{level} in {text}");
        }
        assert_eq!(text.matches(" | x").count(), MAX_TABLE_DEPTH, "{text}");
    }

    /// Text moved with changes tracked is read once, where it now stands; deleted and hidden
    /// text is not read.
    #[test]
    fn tracked_moves_deletions_and_hidden_text_are_read_as_a_reader_sees_them() {
        let body = r#"<w:p><w:moveFrom w:id="1" w:author="A"><w:r><w:t>Moved words.</w:t></w:r></w:moveFrom><w:r><w:t xml:space="preserve">Kept </w:t></w:r><w:del w:id="2" w:author="A"><w:r><w:delText>gone </w:delText></w:r></w:del><w:r><w:rPr><w:vanish/></w:rPr><w:t>secret </w:t></w:r><w:r><w:rPr><w:vanish w:val="false"/></w:rPr><w:t xml:space="preserve">shown </w:t></w:r><w:r><w:rPr><w:rPrChange w:id="4" w:author="A"><w:rPr><w:vanish/></w:rPr></w:rPrChange></w:rPr><w:t xml:space="preserve">unhidden </w:t></w:r><w:moveTo w:id="3" w:author="A"><w:r><w:t>Moved words.</w:t></w:r></w:moveTo></w:p><w:p><w:pPr><w:rPr><w:vanish/></w:rPr></w:pPr><w:r><w:t>Next paragraph.</w:t></w:r></w:p>"#;
        let document = parse(&docx_with_body(body), &ParseOptions::default()).unwrap();
        let text: Vec<&str> = document.sections.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(text.join("\n"), "Kept shown unhidden Moved words.\nNext paragraph.");
    }

    #[test]
    fn all_parts_together_are_held_to_the_document_limit() {
        let picture = vec![b'x'; 50_000];
        let bytes = fixtures::docx(&[
            DocxBlock::Paragraph("Intro"),
            DocxBlock::Image {
                bytes: &picture,
                description: None,
            },
            DocxBlock::Image {
                bytes: &picture,
                description: None,
            },
        ]);
        let limits = |unpacked_bytes| Limits {
            unpacked_bytes,
            ..Limits::DOCUMENT
        };
        // Each picture fits the per-image cap; only the first fits what the text left of the total.
        let document = parse_within(&bytes, &options_with_images(), &limits(70_000)).unwrap();
        assert_eq!(document.images.len(), 1);
        assert_eq!(document.sections[0].text, "Intro");
        let err = parse_within(&bytes, &options_with_images(), &limits(100)).unwrap_err();
        assert!(
            err.to_string().contains("word/document.xml unpacks to more than 100"),
            "{err}"
        );
    }

    #[test]
    fn localised_heading_styles_are_found_through_styles_xml() {
        let styles = r#"<w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
            <w:style w:type="paragraph" w:styleId="berschrift1"><w:name w:val="heading 1"/></w:style>
            <w:style w:type="paragraph" w:styleId="Custom"><w:name w:val="Custom"/><w:pPr><w:outlineLvl w:val="1"/></w:pPr></w:style>
            <w:style w:type="paragraph" w:styleId="Normal"><w:name w:val="Normal"/></w:style>
        </w:styles>"#;
        let got = heading_styles(styles).unwrap();
        assert_eq!(got.get("berschrift1"), Some(&1));
        assert_eq!(got.get("Custom"), Some(&2));
        assert_eq!(got.get("Normal"), None);
    }

    #[test]
    fn relationship_targets_resolve_to_zip_paths() {
        assert_eq!(part_path("media/image1.png"), "word/media/image1.png");
        assert_eq!(part_path("../media/a.jpeg"), "media/a.jpeg");
        assert_eq!(part_path("/word/media/b.gif"), "word/media/b.gif");
    }

    #[test]
    fn a_zip_that_is_not_a_word_document_is_refused() {
        let bytes = fixtures::zip_archive(&[("hello.txt", b"hi".as_slice())]);
        let err = parse(&bytes, &ParseOptions::default()).unwrap_err();
        assert!(err.to_string().contains("no word/document.xml"), "{err}");
        let err = parse(b"not a zip at all", &ParseOptions::default()).unwrap_err();
        assert!(err.to_string().starts_with("not a valid docx file"), "{err}");
    }
}
