//! What a parser hands to the chunker: ordered sections of text with their structure, and the
//! images found on the way.

/// The kind of a section, so the chunker can keep tables and headings whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    Heading,
    Paragraph,
    /// Rows of a table or a sheet, one row per line.
    Table,
    /// Preformatted or code text.
    Code,
}

/// One block of text in document order.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub kind: SectionKind,
    pub text: String,
    /// The heading path above this block, e.g. "Install > Linux"; sheet name for spreadsheets.
    pub title: Option<String>,
    /// 1-based page number where known (PDF).
    pub page: Option<u32>,
}

/// An image embedded in the document.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtractedImage {
    pub bytes: Vec<u8>,
    pub mime: String,
    /// 0-based position among the document's images.
    pub index: u32,
    pub page: Option<u32>,
    /// Caption or alt text found next to the image.
    pub caption: Option<String>,
    /// The heading the image sits under.
    pub section_title: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedDocument {
    pub sections: Vec<Section>,
    pub images: Vec<ExtractedImage>,
    /// Pages (PDF) or sheets (spreadsheets), where the format has them.
    pub page_count: Option<u32>,
}

impl ParsedDocument {
    /// All text, sections separated by blank lines.
    pub fn full_text(&self) -> String {
        self.sections
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}
