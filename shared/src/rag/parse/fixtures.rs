//! Builds minimal but valid docx, xlsx and PDF files in code, so tests commit no binaries.

use std::io::{Cursor, Write};

use base64::Engine;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

/// A zip file holding `entries` (name, content), deflated like office files are.
pub fn zip_archive(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    for (name, content) in entries {
        writer.start_file(*name, options).expect("start zip entry");
        writer.write_all(content).expect("write zip entry");
    }
    writer.finish().expect("finish zip").into_inner()
}

/// `archive` with the entry `name` replaced by `content` (or added), for hostile files no
/// builder here would write.
pub fn with_zip_entry(archive: &[u8], name: &str, content: &[u8]) -> Vec<u8> {
    let mut reader = zip::ZipArchive::new(Cursor::new(archive)).expect("read zip");
    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
    for index in 0..reader.len() {
        let mut file = reader.by_index(index).expect("zip entry");
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).expect("unzip entry");
        let entry_name = file.name().expect("zip entry name").into_owned();
        if entry_name != name {
            entries.push((entry_name, bytes));
        }
    }
    entries.push((name.to_owned(), content.to_vec()));
    let entries: Vec<(&str, &[u8])> = entries.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    zip_archive(&entries)
}

/// A 1x1 transparent PNG.
pub fn png() -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
        .expect("valid base64")
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const RELATIONSHIPS_NS: &str = "http://schemas.openxmlformats.org/package/2006/relationships";
const RELATIONSHIP_TYPES: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";

fn relationships(items: &[(String, &str, String)]) -> String {
    let items: String = items
        .iter()
        .map(|(id, kind, target)| {
            format!(r#"<Relationship Id="{id}" Type="{RELATIONSHIP_TYPES}/{kind}" Target="{target}"/>"#)
        })
        .collect();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="{RELATIONSHIPS_NS}">{items}</Relationships>"#
    )
}

fn content_types(overrides: &[(String, &str)]) -> String {
    let overrides: String = overrides
        .iter()
        .map(|(part, kind)| {
            format!(
                r#"<Override PartName="{part}" ContentType="application/vnd.openxmlformats-officedocument.{kind}"/>"#
            )
        })
        .collect();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Default Extension="png" ContentType="image/png"/>{overrides}</Types>"#
    )
}

/// An xlsx workbook with one worksheet per `(name, rows)`. Cells that parse as numbers are stored
/// as numbers, the others as shared strings; empty cells are left out.
pub fn xlsx(sheets: &[(&str, Vec<Vec<String>>)]) -> Vec<u8> {
    let mut shared_strings: Vec<String> = Vec::new();
    let mut files: Vec<(String, String)> = Vec::new();
    for (index, (_, rows)) in sheets.iter().enumerate() {
        let mut sheet_rows = String::new();
        for (r, row) in rows.iter().enumerate() {
            let mut cells = String::new();
            for (c, value) in row.iter().enumerate().filter(|(_, value)| !value.is_empty()) {
                let reference = format!("{}{}", column_name(c), r + 1);
                if value.parse::<f64>().is_ok() {
                    cells.push_str(&format!(r#"<c r="{reference}"><v>{value}</v></c>"#));
                } else {
                    shared_strings.push(value.clone());
                    let id = shared_strings.len() - 1;
                    cells.push_str(&format!(r#"<c r="{reference}" t="s"><v>{id}</v></c>"#));
                }
            }
            sheet_rows.push_str(&format!(r#"<row r="{}">{cells}</row>"#, r + 1));
        }
        files.push((
            format!("xl/worksheets/sheet{}.xml", index + 1),
            format!(
                r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>{sheet_rows}</sheetData></worksheet>"#
            ),
        ));
    }
    let strings: String = shared_strings
        .iter()
        .map(|s| format!(r#"<si><t xml:space="preserve">{}</t></si>"#, xml_escape(s)))
        .collect();
    files.push((
        "xl/sharedStrings.xml".to_owned(),
        format!(
            r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="{0}" uniqueCount="{0}">{strings}</sst>"#,
            shared_strings.len()
        ),
    ));
    let sheet_list: String = sheets
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            format!(
                r#"<sheet name="{}" sheetId="{}" r:id="rId{}"/>"#,
                xml_escape(name),
                i + 1,
                i + 1
            )
        })
        .collect();
    files.push((
        "xl/workbook.xml".to_owned(),
        format!(
            r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="{RELATIONSHIP_TYPES}"><sheets>{sheet_list}</sheets></workbook>"#
        ),
    ));
    let mut workbook_relationships: Vec<(String, &str, String)> = (1..=sheets.len())
        .map(|i| (format!("rId{i}"), "worksheet", format!("worksheets/sheet{i}.xml")))
        .collect();
    workbook_relationships.push(("rIdStrings".to_owned(), "sharedStrings", "sharedStrings.xml".to_owned()));
    files.push((
        "xl/_rels/workbook.xml.rels".to_owned(),
        relationships(&workbook_relationships),
    ));
    files.push((
        "_rels/.rels".to_owned(),
        relationships(&[("rId1".to_owned(), "officeDocument", "xl/workbook.xml".to_owned())]),
    ));
    let mut overrides = vec![
        ("/xl/workbook.xml".to_owned(), "spreadsheetml.sheet.main+xml"),
        ("/xl/sharedStrings.xml".to_owned(), "spreadsheetml.sharedStrings+xml"),
    ];
    overrides
        .extend((1..=sheets.len()).map(|i| (format!("/xl/worksheets/sheet{i}.xml"), "spreadsheetml.worksheet+xml")));
    files.push(("[Content_Types].xml".to_owned(), content_types(&overrides)));

    let entries: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(name, xml)| (name.as_str(), xml.as_bytes()))
        .collect();
    zip_archive(&entries)
}

/// "A".."Z", "AA".. for a 0-based column.
fn column_name(mut column: usize) -> String {
    let mut name = Vec::new();
    loop {
        name.push(b'A' + (column % 26) as u8);
        if column < 26 {
            break;
        }
        column = column / 26 - 1;
    }
    name.reverse();
    String::from_utf8(name).expect("ASCII")
}

/// One block of a generated Word document.
pub enum DocxBlock<'a> {
    Title(&'a str),
    Heading(u8, &'a str),
    /// '\t' becomes a tab and '\n' a line break.
    Paragraph(&'a str),
    Table(Vec<Vec<&'a str>>),
    /// A PNG drawn inline in its own paragraph.
    Image {
        bytes: &'a [u8],
        description: Option<&'a str>,
    },
}

/// A docx file with `blocks` as its body; headings use the built-in style ids ("Heading1",
/// "Title") and the file has no styles.xml, as minimal generators write it.
pub fn docx(blocks: &[DocxBlock]) -> Vec<u8> {
    let mut body = String::new();
    let mut images: Vec<(String, Vec<u8>)> = Vec::new();
    for block in blocks {
        match block {
            DocxBlock::Title(text) => body.push_str(&docx_paragraph(Some("Title"), text)),
            DocxBlock::Heading(level, text) => body.push_str(&docx_paragraph(Some(&format!("Heading{level}")), text)),
            DocxBlock::Paragraph(text) => body.push_str(&docx_paragraph(None, text)),
            DocxBlock::Table(rows) => {
                body.push_str("<w:tbl><w:tblPr><w:tblW w:w=\"0\" w:type=\"auto\"/></w:tblPr>");
                for row in rows {
                    body.push_str("<w:tr>");
                    for cell in row {
                        body.push_str(&format!("<w:tc>{}</w:tc>", docx_paragraph(None, cell)));
                    }
                    body.push_str("</w:tr>");
                }
                body.push_str("</w:tbl>");
            }
            DocxBlock::Image { bytes, description } => {
                images.push((format!("media/image{}.png", images.len() + 1), bytes.to_vec()));
                let number = images.len();
                let description = description
                    .map(|d| format!(r#" descr="{}""#, xml_escape(d)))
                    .unwrap_or_default();
                body.push_str(&format!(
                    r#"<w:p><w:r><w:drawing><wp:inline><wp:extent cx="9525" cy="9525"/><wp:docPr id="{number}" name="Picture {number}"{description}/><a:graphic><a:graphicData uri="http://schemas.openxmlformats.org/drawingml/2006/picture"><pic:pic><pic:nvPicPr><pic:cNvPr id="{number}" name="image{number}.png"/><pic:cNvPicPr/></pic:nvPicPr><pic:blipFill><a:blip r:embed="rIdImage{number}"/><a:stretch><a:fillRect/></a:stretch></pic:blipFill><pic:spPr/></pic:pic></a:graphicData></a:graphic></wp:inline></w:drawing></w:r></w:p>"#
                ));
            }
        }
    }
    let document = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:r="{RELATIONSHIP_TYPES}" xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" xmlns:pic="http://schemas.openxmlformats.org/drawingml/2006/picture"><w:body>{body}<w:sectPr/></w:body></w:document>"#
    );
    let image_relationships: Vec<(String, &str, String)> = images
        .iter()
        .enumerate()
        .map(|(i, (target, _))| (format!("rIdImage{}", i + 1), "image", target.clone()))
        .collect();
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (
            "[Content_Types].xml".to_owned(),
            content_types(&[("/word/document.xml".to_owned(), "wordprocessingml.document.main+xml")]).into_bytes(),
        ),
        (
            "_rels/.rels".to_owned(),
            relationships(&[("rId1".to_owned(), "officeDocument", "word/document.xml".to_owned())]).into_bytes(),
        ),
        ("word/document.xml".to_owned(), document.into_bytes()),
        (
            "word/_rels/document.xml.rels".to_owned(),
            relationships(&image_relationships).into_bytes(),
        ),
    ];
    files.extend(
        images
            .into_iter()
            .map(|(target, bytes)| (format!("word/{target}"), bytes)),
    );
    let entries: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(name, bytes)| (name.as_str(), bytes.as_slice()))
        .collect();
    zip_archive(&entries)
}

fn docx_paragraph(style: Option<&str>, text: &str) -> String {
    let properties = style
        .map(|style| format!(r#"<w:pPr><w:pStyle w:val="{style}"/></w:pPr>"#))
        .unwrap_or_default();
    let mut runs = String::new();
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            runs.push_str("<w:r><w:br/></w:r>");
        }
        for (j, piece) in line.split('\t').enumerate() {
            if j > 0 {
                runs.push_str("<w:r><w:tab/></w:r>");
            }
            if !piece.is_empty() {
                runs.push_str(&format!(
                    r#"<w:r><w:t xml:space="preserve">{}</w:t></w:r>"#,
                    xml_escape(piece)
                ));
            }
        }
    }
    format!("<w:p>{properties}{runs}</w:p>")
}

/// A PDF with one page per entry, each line of it drawn in Helvetica (WinAnsi encoding).
pub fn pdf(pages: &[&str]) -> Vec<u8> {
    pdf_document(pages, Extra::None)
}

/// Like [`pdf`], with `jpeg` drawn on the first page as a DCTDecode image XObject.
pub fn pdf_with_jpeg(pages: &[&str], jpeg: &[u8]) -> Vec<u8> {
    pdf_document(pages, Extra::Jpeg(jpeg))
}

/// Like [`pdf_with_jpeg`], the same picture drawn on every page (a logo in a header).
pub fn pdf_with_jpeg_on_every_page(pages: &[&str], jpeg: &[u8]) -> Vec<u8> {
    pdf_document(pages, Extra::JpegOnEveryPage(jpeg))
}

/// Like [`pdf`], every page drawing first a form (object 4) that shows `form_text`: a stamp,
/// or another PDF's page placed on this one.
pub fn pdf_with_form(pages: &[&str], form_text: &str) -> Vec<u8> {
    pdf_document(pages, Extra::Form(form_text))
}

/// Like [`pdf`], its font's text read through the ToUnicode map `cmap` (no `/Encoding`).
pub fn pdf_with_to_unicode(pages: &[&str], cmap: &str) -> Vec<u8> {
    pdf_document(pages, Extra::ToUnicode(cmap))
}

/// What object 4 holds.
enum Extra<'a> {
    None,
    Jpeg(&'a [u8]),
    JpegOnEveryPage(&'a [u8]),
    ToUnicode(&'a str),
    Form(&'a str),
}

fn pdf_document(pages: &[&str], extra: Extra<'_>) -> Vec<u8> {
    // Objects 1-3 are the catalog, the page tree and the font, 4 the image or the font's map;
    // each page then takes two: the page and its content stream.
    let draws_form = matches!(extra, Extra::Form(_));
    let (jpeg, every_page) = match extra {
        Extra::Jpeg(jpeg) => (Some(jpeg), false),
        Extra::JpegOnEveryPage(jpeg) => (Some(jpeg), true),
        _ => (None, false),
    };
    let first_page = 5;
    let mut objects: Vec<Vec<u8>> = Vec::new();
    let kids: Vec<String> = (0..pages.len())
        .map(|i| format!("{} 0 R", first_page + 2 * i))
        .collect();
    objects.push(b"<< /Type /Catalog /Pages 2 0 R >>".to_vec());
    objects.push(format!("<< /Type /Pages /Kids [{}] /Count {} >>", kids.join(" "), pages.len()).into_bytes());
    match extra {
        Extra::ToUnicode(cmap) => {
            objects.push(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 4 0 R >>".to_vec());
            objects.push(stream("", cmap.as_bytes()));
        }
        Extra::Form(text) => {
            objects.push(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>".to_vec());
            objects.push(stream(
                "/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>",
                format!("BT /F1 12 Tf 72 720 Td ({}) Tj ET", pdf_string(text)).as_bytes(),
            ));
        }
        _ => {
            objects.push(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>".to_vec());
            objects.push(stream(
                "/Type /XObject /Subtype /Image /Width 1 /Height 1 /ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /DCTDecode",
                jpeg.unwrap_or_default(),
            ));
        }
    }
    for (i, text) in pages.iter().enumerate() {
        let draws_image = (i == 0 || every_page) && jpeg.is_some();
        let xobjects = match (draws_image, draws_form) {
            (true, _) => " /XObject << /Im1 4 0 R >>",
            (_, true) => " /XObject << /Fm1 4 0 R >>",
            _ => "",
        };
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >>{xobjects} >> /Contents {} 0 R >>",
                first_page + 2 * i + 1
            )
            .into_bytes(),
        );
        let mut content = String::new();
        if draws_image {
            content.push_str("q 100 0 0 100 72 500 cm /Im1 Do Q\n");
        }
        if draws_form {
            content.push_str("q /Fm1 Do Q\n");
        }
        if !text.is_empty() {
            content.push_str("BT /F1 12 Tf 72 720 Td");
            for (j, line) in text.lines().enumerate() {
                if j > 0 {
                    content.push_str(" 0 -14 Td");
                }
                content.push_str(&format!(" ({}) Tj", pdf_string(line)));
            }
            content.push_str(" ET\n");
        }
        objects.push(stream("", content.as_bytes()));
    }

    let mut out = b"%PDF-1.4\n%\xE2\xE3\xCF\xD3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(object);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

fn stream(dictionary: &str, content: &[u8]) -> Vec<u8> {
    let mut object = format!("<< {dictionary} /Length {} >>\nstream\n", content.len()).into_bytes();
    object.extend_from_slice(content);
    object.extend_from_slice(b"\nendstream");
    object
}

/// A literal string in WinAnsi, non-ASCII bytes as octal escapes so the file stays ASCII.
fn pdf_string(text: &str) -> String {
    let (bytes, _, _) = encoding_rs::WINDOWS_1252.encode(text);
    bytes
        .iter()
        .map(|&b| match b {
            b'(' | b')' | b'\\' => format!("\\{}", b as char),
            0x20..=0x7e => (b as char).to_string(),
            _ => format!("\\{b:03o}"),
        })
        .collect()
}
