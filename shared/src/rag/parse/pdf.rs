//! PDF: the text layer of each page, and embedded JPEG images.
//!
//! Text is read from the content streams' text operators, with line breaks where the text moves
//! to a new line; the layout (columns, reading order of positioned text) is not reconstructed.
//! Only images stored as JPEG (DCTDecode) are extracted, because their stream bytes are a JPEG
//! file as they stand; other image encodings would need decoding and re-encoding and are skipped.
//! Scanned PDFs have no text layer and are refused with a hint to use OCR.

use std::collections::{BTreeMap, HashSet};

use lopdf::content::{Content, Operation};
use lopdf::{DecompressError, Dictionary, Document, Encoding, LoadOptions, Object, ObjectId};

use super::image_collector::{ImageCollector, ImagePlace};
use super::limits::{Budget, Limits};
use super::pdf_fonts::Fonts;
use super::{ParseError, ParseOptions};
use crate::rag::document::{ParsedDocument, Section, SectionKind};

/// Kerning in a TJ array wider than this (thousandths of an em) is a word gap.
const WORD_GAP: f32 = 200.0;

/// Decompressed drawing operators of one page. Decoded, each operator takes some 40 times the
/// bytes of its text ("n" becomes a 48-byte operation and an allocation), so this is what
/// bounds the memory one page takes; text pages need well under 1 MiB, a dense vector drawing
/// a few MiB.
const MAX_PAGE_CONTENT_BYTES: usize = 8 * 1024 * 1024;

/// One object or cross-reference stream unpacked while the file loads.
const MAX_LOAD_STREAM_BYTES: usize = 64 * 1024 * 1024;

pub(super) fn parse(bytes: &[u8], options: &ParseOptions) -> Result<ParsedDocument, ParseError> {
    parse_within(bytes, options, &Limits::DOCUMENT)
}

fn parse_within(bytes: &[u8], options: &ParseOptions, limits: &Limits) -> Result<ParsedDocument, ParseError> {
    let load = LoadOptions::with_max_decompressed_size(MAX_LOAD_STREAM_BYTES);
    let document = Document::load_mem_with_options(bytes, load).map_err(|err| match err {
        lopdf::Error::Decompress(DecompressError::MemoryLimitExceeded { .. }) => ParseError(format!(
            "the document is too large to index: one of its streams unpacks to more than {} MiB",
            MAX_LOAD_STREAM_BYTES / (1024 * 1024)
        )),
        err => ParseError(format!("not a valid PDF file: {err}")),
    })?;
    if document.is_encrypted() {
        return Err(ParseError::new(
            "the PDF is password-protected: remove the password and upload it again",
        ));
    }
    let pages = document.get_pages();
    // Pages are bounded one by one above and together here: a page tree can list one heavy
    // page thousands of times.
    let mut unpacked = limits.unpacked();
    let mut text = limits.text();
    let mut sections = Vec::new();
    let mut images = ImageCollector::new(options);
    let mut so_far = ReadSoFar {
        fonts: Fonts::default(),
        forms_drawn: HashSet::new(),
    };
    // Pictures already taken, by object: a logo in every page's header (or pictures listed
    // in resources every page inherits) is one picture, not one per page, each read (paid).
    let mut pictures = HashSet::new();
    for (&number, &page_id) in &pages {
        // A damaged file can still list its pages; without this check it would pass for a scan.
        if let Some((id, generation)) = std::iter::once(page_id)
            .chain(document.get_page_contents(page_id))
            .find(|&id| document.get_object(id).is_err())
        {
            return Err(ParseError(format!(
                "not a valid PDF file: page {number} (object {id} {generation}) is missing or damaged"
            )));
        }
        let text = page_text(&document, page_id, &mut so_far, &mut unpacked, &mut text).map_err(|err| match err {
            PageError::Pdf(err) => ParseError(format!("not a valid PDF file: page {number}: {err}")),
            PageError::TooLarge(err) => err,
        })?;
        if !text.trim().is_empty() {
            sections.push(Section {
                kind: SectionKind::Paragraph,
                text: text.trim().to_owned(),
                title: None,
                page: Some(number),
            });
        }
        if images.wants_more() {
            collect_jpegs(&document, page_id, number, &mut images, &mut pictures);
        }
    }
    if sections.is_empty() && !pages.is_empty() {
        return Err(ParseError::new(
            "the PDF has no text layer (a scanned document?): enable OCR (the extparse engine with doOcr) to read it",
        ));
    }
    Ok(ParsedDocument {
        sections,
        images: images.into_images(),
        page_count: u32::try_from(pages.len()).ok(),
    })
}

/// What separates the next piece of text from the text before it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Gap {
    Space,
    Line,
}

/// The text of a page as it is drawn, with the gaps the drawing position implies.
#[derive(Default)]
struct PageText {
    text: String,
    pending: Option<Gap>,
    /// Vertical position of the current line, in text space; scaling is ignored, only changes matter.
    line_y: f32,
    /// Vertical position of the last text shown.
    shown_y: Option<f32>,
}

impl PageText {
    fn gap(&mut self, gap: Gap) {
        self.pending = self.pending.max(Some(gap));
    }

    /// A move of the text position: to another line, or along the same one (a word gap, at a guess).
    fn move_to(&mut self, y: f32) {
        self.line_y = y;
        self.gap(Gap::Space);
    }

    fn push(&mut self, piece: &str) {
        if piece.is_empty() {
            return;
        }
        if self.shown_y.is_some_and(|y| (y - self.line_y).abs() > 1.0) {
            self.gap(Gap::Line);
        }
        if !self.text.is_empty() {
            match self.pending {
                Some(Gap::Line) => self.text.push('\n'),
                Some(Gap::Space) if !self.text.ends_with(char::is_whitespace) && !piece.starts_with(' ') => {
                    self.text.push(' ')
                }
                _ => {}
            }
        }
        self.pending = None;
        self.shown_y = Some(self.line_y);
        self.text.push_str(piece);
    }
}

enum PageError {
    Pdf(lopdf::Error),
    TooLarge(ParseError),
}

impl From<lopdf::Error> for PageError {
    fn from(err: lopdf::Error) -> Self {
        Self::Pdf(err)
    }
}

/// Forms drawn inside forms, at most: deeper is not layout.
const MAX_FORM_DEPTH: usize = 8;

/// What one page reads of a document: its fonts, and the forms drawn so far (a form drawn
/// again, on this page or a later one, is read once: a background on 150 pages is one).
struct ReadSoFar<'a> {
    fonts: Fonts<'a>,
    forms_drawn: HashSet<ObjectId>,
}

fn page_text<'a>(
    document: &'a Document,
    page_id: ObjectId,
    so_far: &mut ReadSoFar<'a>,
    unpacked: &mut Budget,
    text: &mut Budget,
) -> Result<String, PageError> {
    let scope = Scope::of_page(document, page_id)?;
    let mut page_left = MAX_PAGE_CONTENT_BYTES;
    let content = unpack_within(&mut page_left, unpacked, |limit| {
        document.get_page_content_with_limit(page_id, limit)
    })?;
    let content = Content::decode(&content)?;
    let mut drawing = Drawing {
        document,
        fonts: &mut so_far.fonts,
        page: PageText::default(),
        unpacked,
        page_left,
        text,
        forms_drawn: &mut so_far.forms_drawn,
    };
    drawing.draw(&content.operations, &scope, None, 0)?;
    let page = drawing.page;
    text.charge(page.text.len()).map_err(PageError::TooLarge)?;
    Ok(page.text)
}

/// Drawing operators `read` unpacks within what is left of the page's cap (its own operators
/// and those of the forms it draws, together) and of the document's budget, charged to both.
fn unpack_within(
    page_left: &mut usize,
    unpacked: &mut Budget,
    read: impl FnOnce(usize) -> lopdf::Result<Vec<u8>>,
) -> Result<Vec<u8>, PageError> {
    let limit = (*page_left).min(unpacked.left());
    let content = match read(limit) {
        Err(lopdf::Error::Decompress(DecompressError::MemoryLimitExceeded { .. })) if unpacked.left() < *page_left => {
            return Err(PageError::TooLarge(unpacked.exceeded()))
        }
        Err(lopdf::Error::Decompress(DecompressError::MemoryLimitExceeded { .. })) => {
            return Err(PageError::TooLarge(ParseError(format!(
                "the document is too large to index: a page's drawing unpacks to more than {} MiB",
                MAX_PAGE_CONTENT_BYTES / (1024 * 1024)
            ))))
        }
        other => other?,
    };
    unpacked.charge(content.len()).map_err(PageError::TooLarge)?;
    *page_left = page_left.saturating_sub(content.len());
    Ok(content)
}

/// Where a drawing finds its fonts and the XObjects it draws: the page's resources, or a
/// form's own.
struct Scope<'a> {
    fonts: BTreeMap<Vec<u8>, &'a Dictionary>,
    xobjects: BTreeMap<Vec<u8>, ObjectId>,
}

impl<'a> Scope<'a> {
    fn of_page(document: &'a Document, page_id: ObjectId) -> lopdf::Result<Self> {
        let fonts = document.get_page_fonts(page_id)?;
        let (inline, inherited) = document.get_page_resources(page_id)?;
        let mut xobjects = BTreeMap::new();
        // The nearest resources first: a name is taken from the first that has it.
        let resources = inline
            .into_iter()
            .chain(inherited.iter().filter_map(|id| document.get_dictionary(*id).ok()));
        for dictionary in resources {
            add_xobjects(document, dictionary, &mut xobjects);
        }
        Ok(Self { fonts, xobjects })
    }

    /// A form's scope: its own resources, or (a form without any) those it is drawn with.
    fn of_form(&self, document: &'a Document, form: &'a Dictionary) -> Self {
        let Ok(resources) = form.get_deref(b"Resources", document).and_then(Object::as_dict) else {
            return Self {
                fonts: self.fonts.clone(),
                xobjects: self.xobjects.clone(),
            };
        };
        let mut xobjects = BTreeMap::new();
        add_xobjects(document, resources, &mut xobjects);
        let fonts = resources
            .get_deref(b"Font", document)
            .and_then(Object::as_dict)
            .map(|fonts| {
                fonts
                    .iter()
                    .filter_map(|(name, font)| {
                        let font = match font {
                            Object::Reference(id) => document.get_dictionary(*id).ok()?,
                            Object::Dictionary(font) => font,
                            _ => return None,
                        };
                        Some((name.clone(), font))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self { fonts, xobjects }
    }
}

fn add_xobjects(document: &Document, resources: &Dictionary, into: &mut BTreeMap<Vec<u8>, ObjectId>) {
    let Ok(xobjects) = resources.get_deref(b"XObject", document).and_then(Object::as_dict) else {
        return;
    };
    for (name, value) in xobjects.iter() {
        if let Ok(id) = value.as_reference() {
            into.entry(name.clone()).or_insert(id);
        }
    }
}

/// The text of one page as its operators draw it, forms (XObjects of their own operators:
/// stamps, pages of other PDFs placed on this one) included.
struct Drawing<'a, 'b> {
    document: &'a Document,
    fonts: &'b mut Fonts<'a>,
    page: PageText,
    unpacked: &'b mut Budget,
    /// What is left of the page's cap on unpacked operators.
    page_left: usize,
    text: &'b mut Budget,
    /// Forms already drawn in the document: one drawn twice is read once, and one drawing
    /// itself is not followed round.
    forms_drawn: &'b mut HashSet<ObjectId>,
}

impl<'a> Drawing<'a, '_> {
    /// `font` is the one in use when the drawing starts: a form goes on with its caller's.
    fn draw(
        &mut self,
        operations: &[Operation],
        scope: &Scope<'a>,
        mut font: Option<usize>,
        depth: usize,
    ) -> Result<(), PageError> {
        for operation in operations {
            let operands = &operation.operands;
            let page = &mut self.page;
            let encoding = font.and_then(|at| self.fonts.encoding(at));
            match operation.operator.as_str() {
                "Tf" => {
                    font = operands
                        .first()
                        .and_then(|name| name.as_name().ok())
                        .and_then(|name| scope.fonts.get(name))
                        .and_then(|dictionary| self.fonts.of(self.document, dictionary));
                }
                "Tj" => show(page, encoding, operands.first()),
                "'" => {
                    page.gap(Gap::Line);
                    show(page, encoding, operands.first());
                }
                "\"" => {
                    page.gap(Gap::Line);
                    show(page, encoding, operands.get(2));
                }
                "TJ" => {
                    let items = operands.first().and_then(|array| array.as_array().ok());
                    for item in items.into_iter().flatten() {
                        match item {
                            Object::String(..) => show(page, encoding, Some(item)),
                            other => {
                                if other.as_float().is_ok_and(|kerning| -kerning > WORD_GAP) {
                                    page.gap(Gap::Space);
                                }
                            }
                        }
                    }
                }
                "Td" | "TD" => {
                    let y = operands.get(1).and_then(|y| y.as_float().ok()).unwrap_or(0.0);
                    page.move_to(page.line_y + y);
                }
                "Tm" => {
                    let y = operands.get(5).and_then(|y| y.as_float().ok()).unwrap_or(0.0);
                    page.move_to(y);
                }
                // BT resets the text matrix; the next Td or Tm says where the text goes.
                "BT" => page.line_y = 0.0,
                "T*" => page.gap(Gap::Line),
                "Do" if depth < MAX_FORM_DEPTH => self.form(operands.first(), scope, font, depth)?,
                _ => {}
            }
            // A font can map one byte to a long string, so the text can outgrow its operators.
            if self.page.text.len() > self.text.left() {
                return Err(PageError::TooLarge(self.text.exceeded()));
            }
        }
        Ok(())
    }

    /// Draws the form `name` names, if it is one (an image is not).
    fn form(
        &mut self,
        name: Option<&Object>,
        scope: &Scope<'a>,
        font: Option<usize>,
        depth: usize,
    ) -> Result<(), PageError> {
        let Some(&id) = name.and_then(|n| n.as_name().ok()).and_then(|n| scope.xobjects.get(n)) else {
            return Ok(());
        };
        let document = self.document;
        let Ok(stream) = document.get_object(id).and_then(Object::as_stream) else {
            return Ok(());
        };
        if stream.dict.get(b"Subtype").and_then(Object::as_name).ok() != Some(b"Form".as_slice())
            || !self.forms_drawn.insert(id)
        {
            return Ok(());
        }
        let content = match unpack_within(&mut self.page_left, self.unpacked, |limit| {
            stream.get_plain_content_with_limit(limit)
        }) {
            Ok(content) => content,
            // A form that cannot be read (a filter lopdf lacks, a damaged stream) loses its
            // own text, not the page's; one past the caps ends the document as a page would.
            Err(PageError::Pdf(_)) => return Ok(()),
            Err(too_large) => return Err(too_large),
        };
        let Ok(content) = Content::decode(&content) else {
            return Ok(());
        };
        let inner = scope.of_form(document, &stream.dict);
        self.page.gap(Gap::Line);
        self.draw(&content.operations, &inner, font, depth + 1)?;
        self.page.gap(Gap::Line);
        Ok(())
    }
}

fn show(page: &mut PageText, encoding: Option<&Encoding>, operand: Option<&Object>) {
    let (Some(encoding), Some(Object::String(bytes, _))) = (encoding, operand) else {
        return;
    };
    if let Ok(text) = encoding.bytes_to_string(bytes) {
        page.push(&text);
    }
}

fn collect_jpegs(
    document: &Document,
    page_id: ObjectId,
    page: u32,
    images: &mut ImageCollector,
    taken: &mut HashSet<ObjectId>,
) {
    // Pictures are extras: a page whose resources cannot be read still gives its text.
    let Ok(page_images) = document.get_page_images(page_id) else {
        return;
    };
    for image in page_images {
        let is_jpeg = image.filters.as_deref().is_some_and(|filters| filters == ["DCTDecode"]);
        if is_jpeg && !taken.contains(&image.id) && images.fits(image.content.len()) {
            taken.insert(image.id);
            images.add(
                image.content.to_vec(),
                "image/jpeg",
                ImagePlace {
                    page: Some(page),
                    ..ImagePlace::default()
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::parse::fixtures;

    #[test]
    fn text_is_read_per_page() {
        let bytes = fixtures::pdf(&[
            "Hello page one",
            "Second page\nhas two lines (really)",
            "Grüße, naïve café",
        ]);
        let document = parse(&bytes, &ParseOptions::default()).unwrap();
        assert_eq!(document.page_count, Some(3));
        let got: Vec<_> = document.sections.iter().map(|s| (s.page, s.text.as_str())).collect();
        assert_eq!(
            got,
            [
                (Some(1), "Hello page one"),
                (Some(2), "Second page\nhas two lines (really)"),
                (Some(3), "Grüße, naïve café"),
            ]
        );
        assert!(document.sections.iter().all(|s| s.kind == SectionKind::Paragraph));
    }

    #[test]
    fn blank_pages_are_skipped_but_counted() {
        let bytes = fixtures::pdf(&["one", "", "three"]);
        let document = parse(&bytes, &ParseOptions::default()).unwrap();
        assert_eq!(document.page_count, Some(3));
        let pages: Vec<_> = document.sections.iter().map(|s| s.page).collect();
        assert_eq!(pages, [Some(1), Some(3)]);
    }

    #[test]
    fn a_pdf_without_text_asks_for_ocr() {
        let err = parse(&fixtures::pdf(&["", ""]), &ParseOptions::default()).unwrap_err();
        assert!(err.to_string().contains("no text layer"), "{err}");
        assert!(err.to_string().contains("OCR"), "{err}");
    }

    #[test]
    fn moves_become_spaces_or_line_breaks() {
        let mut page = PageText::default();
        page.move_to(720.0);
        page.push("Hel");
        page.push("lo");
        page.gap(Gap::Space);
        page.push("world");
        page.move_to(720.0);
        page.push("again");
        page.move_to(706.0);
        page.push("next");
        page.gap(Gap::Line);
        page.push("last");
        assert_eq!(page.text, "Hello world again\nnext\nlast");
    }

    #[test]
    fn jpeg_images_are_extracted_with_their_page() {
        let jpeg = b"\xFF\xD8\xFF\xE0 not a real picture \xFF\xD9";
        let bytes = fixtures::pdf_with_jpeg(&["Picture page", "Text page"], jpeg);
        let options = ParseOptions {
            save_images: true,
            ..ParseOptions::default()
        };
        let document = parse(&bytes, &options).unwrap();
        assert_eq!(document.images.len(), 1);
        assert_eq!(document.images[0].bytes, jpeg);
        assert_eq!(document.images[0].mime, "image/jpeg");
        assert_eq!(document.images[0].page, Some(1));
        assert!(parse(&bytes, &ParseOptions::default()).unwrap().images.is_empty());
    }

    /// Text drawn by a form (a stamp, another PDF's page placed on this one) is the page's
    /// text: a page of nothing else was refused as a scan.
    #[test]
    fn text_inside_forms_is_read() {
        let bytes = fixtures::pdf_with_form(&["", "Own text"], "Stamped text");
        let document = parse(&bytes, &ParseOptions::default()).unwrap();
        let pages: Vec<(Option<u32>, &str)> = document.sections.iter().map(|s| (s.page, s.text.as_str())).collect();
        // The form drawn on both pages is read once, with the first.
        assert_eq!(pages, [(Some(1), "Stamped text"), (Some(2), "Own text")]);
    }

    /// One picture drawn on every page is taken once, with its first page.
    #[test]
    fn a_picture_on_every_page_is_taken_once() {
        let jpeg = b"\xFF\xD8\xFF\xE0 a logo \xFF\xD9";
        let bytes = fixtures::pdf_with_jpeg_on_every_page(&["One", "Two", "Three"], jpeg);
        let options = ParseOptions {
            save_images: true,
            ..ParseOptions::default()
        };
        let document = parse(&bytes, &options).unwrap();
        assert_eq!(document.images.len(), 1);
        assert_eq!(document.images[0].page, Some(1));
    }

    #[test]
    fn a_password_protected_pdf_is_refused() {
        let mut document = Document::load_mem(&fixtures::pdf(&["secret"])).unwrap();
        document.trailer.set(
            "ID",
            Object::Array(vec![
                Object::string_literal(b"0123456789abcdef".to_vec()),
                Object::string_literal(b"fedcba9876543210".to_vec()),
            ]),
        );
        let state = lopdf::EncryptionState::try_from(lopdf::EncryptionVersion::V2 {
            document: &document,
            owner_password: "owner",
            user_password: "user",
            key_length: 128,
            permissions: lopdf::Permissions::all(),
        })
        .unwrap();
        document.encrypt(&state).unwrap();
        let mut bytes = Vec::new();
        document.save_to(&mut bytes).unwrap();
        let err = parse(&bytes, &ParseOptions::default()).unwrap_err();
        assert!(err.to_string().contains("password"), "{err}");
    }

    fn small(unpacked_bytes: usize, text_bytes: usize) -> Limits {
        Limits {
            unpacked_bytes,
            text_bytes,
            ..Limits::DOCUMENT
        }
    }

    #[test]
    fn pages_share_one_budget_for_their_unpacked_drawing() {
        let page = "x".repeat(400);
        let bytes = fixtures::pdf(&[&page, &page, &page]);
        assert!(parse_within(&bytes, &ParseOptions::default(), &small(2000, 1 << 20)).is_ok());
        // Each page fits; three of them do not.
        let err = parse_within(&bytes, &ParseOptions::default(), &small(1000, 1 << 20))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unpacked size exceeds the limit of 1000"), "{err}");
    }

    #[test]
    fn pages_share_one_budget_for_their_text() {
        let page = "x".repeat(400);
        let bytes = fixtures::pdf(&[&page, &page, &page]);
        let err = parse_within(&bytes, &ParseOptions::default(), &small(1 << 20, 1000))
            .unwrap_err()
            .to_string();
        assert!(err.contains("text exceeds the limit of 1000"), "{err}");
    }

    #[test]
    fn a_page_drawing_more_than_its_cap_is_refused() {
        let page = "x".repeat(MAX_PAGE_CONTENT_BYTES);
        let err = parse(&fixtures::pdf(&["fine", &page]), &ParseOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("a page's drawing unpacks to more than 8 MiB"), "{err}");
    }

    const ASCII_MAP: &str = "/CIDInit /ProcSet findresource begin 12 dict begin begincmap
1 begincodespacerange <00> <FF> endcodespacerange
1 beginbfrange <20> <7E> <0020> endbfrange
endcmap CMapName currentdict /CMap defineresource pop end end";

    #[test]
    fn a_fonts_to_unicode_map_reads_its_text_on_every_page() {
        let bytes = fixtures::pdf_with_to_unicode(&["Mapped text", "Page two"], ASCII_MAP);
        let document = parse(&bytes, &ParseOptions::default()).unwrap();
        let pages: Vec<&str> = document.sections.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(pages, ["Mapped text", "Page two"]);
    }

    /// A small map covering more codes than any font has is not expanded (lopdf would build a
    /// table of every code: four billion entries for `<00000000> <FFFFFFFF>`), even behind a
    /// name spelling a keyword: the font loses its text, and the worker its memory no longer.
    #[test]
    fn a_to_unicode_map_covering_too_many_codes_is_not_expanded() {
        let huge = "/CIDInit /ProcSet findresource begin 12 dict begin begincmap
/CMapName /beginbfrange def
1 begincodespacerange <00000000> <FFFFFFFF> endcodespacerange
1 beginbfrange <00000000> <0007FFFF> <0020> endbfrange
endcmap CMapName currentdict /CMap defineresource pop end end";
        let bytes = fixtures::pdf_with_to_unicode(&["Hidden"], huge);
        let err = parse(&bytes, &ParseOptions::default()).unwrap_err();
        assert!(err.to_string().contains("no text layer"), "{err}");
    }

    #[test]
    fn a_truncated_pdf_is_reported() {
        let bytes = fixtures::pdf(&["Hello"]);
        let err = parse(&bytes[..bytes.len() / 3], &ParseOptions::default()).unwrap_err();
        assert!(err.to_string().starts_with("not a valid PDF file"), "{err}");
    }
}
