//! Document parsers: turn an uploaded file into the ordered sections and images the chunker works on.
//!
//! Every parser takes untrusted bytes, so each one reports a broken file as a [`ParseError`] with a
//! message the uploader can act on, and never panics on it.

mod csv_table;
mod docx;
/// Document builders for tests and benchmarks (feature `fixtures`): no binaries committed.
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
mod html;
mod image_collector;
mod limits;
mod markdown;
mod outline;
mod pdf;
mod pdf_fonts;
mod plain_text;
mod table_rows;
mod text_decode;
mod xlsx;
mod zip_entries;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::rag::document::ParsedDocument;

/// What one document may unpack to; also the cap on a converted document fetched from elsewhere.
pub use limits::MAX_UNPACKED_BYTES;

/// The file formats a knowledge base accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Txt,
    Markdown,
    Csv,
    Xlsx,
    Docx,
    Pdf,
    Html,
}

impl FileType {
    /// From the file name's extension (case-insensitive): txt/text/log, md/markdown, csv, xlsx, docx, pdf, html/htm.
    pub fn from_name(name: &str) -> Option<FileType> {
        let (_, extension) = name.rsplit_once('.')?;
        match extension.to_ascii_lowercase().as_str() {
            "txt" | "text" | "log" => Some(Self::Txt),
            "md" | "markdown" => Some(Self::Markdown),
            "csv" => Some(Self::Csv),
            "xlsx" => Some(Self::Xlsx),
            "docx" => Some(Self::Docx),
            "pdf" => Some(Self::Pdf),
            "html" | "htm" => Some(Self::Html),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Txt => "txt",
            Self::Markdown => "md",
            Self::Csv => "csv",
            Self::Xlsx => "xlsx",
            Self::Docx => "docx",
            Self::Pdf => "pdf",
            Self::Html => "html",
        }
    }
}

/// Why a file could not be parsed, worded for the person who uploaded it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

impl ParseError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// What to do with images found in a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseOptions {
    /// Extract embedded images into [`ParsedDocument::images`].
    pub save_images: bool,
    /// Stop extracting after this many images.
    pub max_image_count: usize,
    /// Skip images larger than this.
    pub max_image_bytes: usize,
}

impl Default for ParseOptions {
    fn default() -> Self {
        Self {
            save_images: false,
            max_image_count: 50,
            max_image_bytes: 10 * 1024 * 1024,
        }
    }
}

/// Stops a parse made by `parse_abandonable` once dropped. A parse on a blocking thread runs on
/// when the future waiting for it is dropped (a worker at its deadline, a run whose lease was
/// taken over), and a runaway one (a crafted file) kept a core and its memory from the
/// documents after it; the future holds this, and the parse ends at its next charge of a budget
/// (a PDF page, a CSV or sheet row; DOCX, HTML and Markdown walk their bounded input to its end).
pub struct Abandon(Arc<AtomicBool>);

/// What the parse holds of its `Abandon`.
pub struct Abandoned(Arc<AtomicBool>);

impl Abandon {
    pub fn new() -> (Self, Abandoned) {
        let flag = Arc::new(AtomicBool::new(false));
        (Self(flag.clone()), Abandoned(flag))
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// `parse`, ended early (with an error nobody reads) once its `Abandon` is dropped.
pub fn parse_abandonable(
    file_name: &str,
    bytes: &[u8],
    options: &ParseOptions,
    abandoned: Abandoned,
) -> Result<ParsedDocument, ParseError> {
    let _watching = limits::watch(abandoned.0);
    parse(file_name, bytes, options)
}

/// Parses `bytes` as the format named by `file_name`'s extension.
pub fn parse(file_name: &str, bytes: &[u8], options: &ParseOptions) -> Result<ParsedDocument, ParseError> {
    let file_type = FileType::from_name(file_name).ok_or_else(|| unsupported(file_name))?;
    let document = match file_type {
        FileType::Txt => plain_text::parse(bytes)?,
        FileType::Markdown => markdown::parse(bytes, options)?,
        FileType::Csv => csv_table::parse(file_name, bytes)?,
        FileType::Xlsx => xlsx::parse(bytes)?,
        FileType::Docx => docx::parse(bytes, options)?,
        FileType::Pdf => pdf::parse(bytes, options)?,
        FileType::Html => html::parse(bytes)?,
    };
    let document = without_controls(document);
    if document.sections.iter().all(|section| section.text.trim().is_empty()) {
        return Err(ParseError::new("the document contains no text"));
    }
    Ok(document)
}

/// The document's text without control characters other than layout, whichever parser read
/// it: a PDF font mapping a code to U+0000, or a raw NUL in a Word file, reached the chunks'
/// insert, which Postgres refused after every model stage had been paid for (three times,
/// retried as a passing failure).
fn without_controls(mut document: ParsedDocument) -> ParsedDocument {
    let clean = |text: &mut String| {
        if text.chars().any(text_decode::is_dropped) {
            text.retain(|c| !text_decode::is_dropped(c));
        }
    };
    for section in &mut document.sections {
        clean(&mut section.text);
        section.title.as_mut().map(clean);
    }
    for image in &mut document.images {
        image.caption.as_mut().map(clean);
        image.section_title.as_mut().map(clean);
    }
    document
}

fn unsupported(file_name: &str) -> ParseError {
    match file_name.rsplit_once('.') {
        Some((_, extension)) if !extension.is_empty() => {
            ParseError(format!("unsupported file type: .{}", extension.to_ascii_lowercase()))
        }
        _ => ParseError::new("unsupported file type: the file name has no extension"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ITERATIONS: usize = 500;

    #[test]
    fn file_type_comes_from_the_extension_whatever_its_case() {
        assert_eq!(FileType::from_name("notes.TXT"), Some(FileType::Txt));
        assert_eq!(FileType::from_name("server.log"), Some(FileType::Txt));
        assert_eq!(FileType::from_name("a.b.Markdown"), Some(FileType::Markdown));
        assert_eq!(FileType::from_name("page.HTM"), Some(FileType::Html));
        assert_eq!(FileType::from_name("report.pdf").map(FileType::as_str), Some("pdf"));
        assert_eq!(FileType::from_name("tool.exe"), None);
        assert_eq!(FileType::from_name("README"), None);
    }

    #[test]
    fn an_abandoned_parse_ends_at_its_next_step_and_leaves_the_thread_as_it_was() {
        let csv = format!("a,b\n{}", "1,2\n".repeat(1000));
        let options = ParseOptions::default();
        let (waiting, abandoned) = Abandon::new();
        let parsed = parse_abandonable("t.csv", csv.as_bytes(), &options, abandoned).unwrap();
        let rows: usize = parsed.sections.iter().map(|s| s.text.lines().count()).sum();
        assert_eq!(rows, 1000);
        drop(waiting);

        let (waiting, abandoned) = Abandon::new();
        drop(waiting);
        let err = parse_abandonable("t.csv", csv.as_bytes(), &options, abandoned).unwrap_err();
        assert!(err.to_string().contains("abandoned"), "{err}");
        // The same (pooled) thread's next parse is not the abandoned one's.
        assert!(parse("t.csv", csv.as_bytes(), &options).is_ok());
    }

    #[test]
    fn unsupported_types_are_named() {
        let err = parse("tool.EXE", b"MZ", &ParseOptions::default()).unwrap_err();
        assert_eq!(err.to_string(), "unsupported file type: .exe");
        let err = parse("README", b"text", &ParseOptions::default()).unwrap_err();
        assert!(err.to_string().contains("no extension"), "{err}");
    }

    #[test]
    fn control_characters_leave_every_parsers_text() {
        use crate::rag::parse::fixtures::{self, DocxBlock};
        let docx = fixtures::docx(&[
            DocxBlock::Heading(1, "Intro\u{0}"),
            DocxBlock::Paragraph("a\u{0}b\u{1}c\td"),
        ]);
        let pdf = fixtures::pdf(&["one\u{0}two"]);
        for (name, bytes) in [("a.docx", docx), ("a.pdf", pdf)] {
            let doc = parse(name, &bytes, &ParseOptions::default()).unwrap();
            let all: String = doc
                .sections
                .iter()
                .flat_map(|s| [s.text.as_str(), s.title.as_deref().unwrap_or_default()])
                .collect();
            assert!(!all.chars().any(text_decode::is_dropped), "{name}: {all:?}");
            assert!(!all.is_empty(), "{name}");
        }
    }

    #[test]
    fn empty_documents_are_refused() {
        for name in ["a.txt", "a.md", "a.csv", "a.html"] {
            let err = parse(name, b" \n\n ", &ParseOptions::default()).unwrap_err();
            assert_eq!(err.to_string(), "the document contains no text", "{name}");
        }
    }

    /// A fixed xorshift stream keeps the tests reproducible without a dependency.
    struct Noise(u64);

    impl Noise {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn garbage_gives_an_error_for_every_type() {
        let mut noise = Noise(0x2545_f491_4f6c_dd1d);
        let garbage: Vec<u8> = (0..4096).map(|_| noise.next().to_le_bytes()[0]).collect();
        let options = ParseOptions {
            save_images: true,
            ..ParseOptions::default()
        };
        for name in ["a.txt", "a.md", "a.csv", "a.xlsx", "a.docx", "a.pdf", "a.html"] {
            assert!(parse(name, &garbage, &options).is_err(), "{name} accepted garbage");
            // Garbage behind a valid signature reaches deeper into the parsers.
            for magic in [&b"PK\x03\x04"[..], b"%PDF-1.4\n"] {
                let mut disguised = magic.to_vec();
                disguised.extend_from_slice(&garbage);
                assert!(
                    parse(name, &disguised, &options).is_err(),
                    "{name} accepted disguised garbage"
                );
            }
        }
    }

    #[test]
    fn damaged_files_never_panic() {
        let png = fixtures::png();
        let samples: Vec<(&str, Vec<u8>)> = vec![
            (
                "a.docx",
                fixtures::docx(&[
                    fixtures::DocxBlock::Heading(1, "Title"),
                    fixtures::DocxBlock::Paragraph("Some text"),
                    fixtures::DocxBlock::Table(vec![vec!["a", "b"], vec!["1", "2"]]),
                    fixtures::DocxBlock::Image {
                        bytes: &png,
                        description: Some("picture"),
                    },
                ]),
            ),
            (
                "a.xlsx",
                fixtures::xlsx(&[(
                    "Sheet",
                    vec![vec!["h".into(), "n".into()], vec!["v".into(), "1.5".into()]],
                )]),
            ),
            ("a.pdf", fixtures::pdf(&["page one", "page two\nline"])),
            ("a.pdf", fixtures::pdf_with_jpeg(&["picture"], b"\xFF\xD8\xFF\xD9")),
            (
                "a.md",
                b"# T\n\n```\ncode\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n![x](y)".to_vec(),
            ),
            (
                "a.html",
                b"<h1>T</h1><p>x<br>y</p><table><tr><td>1</td></tr></table><pre>p</pre>".to_vec(),
            ),
            ("a.csv", b"a,b\n1,\"2\"\n".to_vec()),
        ];
        let options = ParseOptions {
            save_images: true,
            ..ParseOptions::default()
        };
        let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
        for (name, sample) in &samples {
            for _ in 0..ITERATIONS {
                let mut damaged = sample.clone();
                for _ in 0..1 + noise.below(8) {
                    let at = noise.below(damaged.len());
                    damaged[at] = noise.next().to_le_bytes()[0];
                }
                if noise.below(4) == 0 {
                    damaged.truncate(noise.below(damaged.len()));
                }
                // Either outcome is fine; a panic fails the test.
                let _ = parse(name, &damaged, &options);
            }
        }
    }
}
