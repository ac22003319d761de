//! Excel workbooks (.xlsx): every worksheet as a table titled with the sheet name. Chart, dialog and
//! macro sheets hold no cells and are skipped, as are empty worksheets.

use std::collections::BTreeMap;
use std::io::Cursor;

use calamine::{Data, ExcelDateTime, Reader, SheetType, Xlsx};
use quick_xml::events::Event;

use super::limits::{Budget, Limits};
use super::table_rows::{self, Row};
use super::zip_entries::{Entry, ZipEntries};
use super::ParseError;
use crate::rag::document::ParsedDocument;

/// Cell formats and number formats a workbook may declare: Excel itself stops at 64,000 cell
/// formats, and calamine keeps one record per declaration.
const MAX_STYLES: usize = 131_072;

pub(super) fn parse(bytes: &[u8]) -> Result<ParsedDocument, ParseError> {
    parse_within(bytes, &Limits::DOCUMENT)
}

fn parse_within(bytes: &[u8], limits: &Limits) -> Result<ParsedDocument, ParseError> {
    check_package(bytes, limits)?;
    let mut workbook = Xlsx::new(Cursor::new(bytes)).map_err(invalid)?;
    let sheet_count = workbook.sheets_metadata().len();
    let worksheets: Vec<String> = workbook
        .sheets_metadata()
        .iter()
        .filter(|sheet| sheet.typ == SheetType::WorkSheet)
        .map(|sheet| sheet.name.clone())
        .collect();
    let mut cells = limits.cells();
    let mut cell_text = limits.text();
    let mut rendered = limits.text();
    let mut sections = Vec::new();
    for name in worksheets {
        let rows = sheet_rows(&mut workbook, &name, &mut cells, &mut cell_text)?;
        sections.extend(table_rows::sections(&name, rows.into_values(), &mut rendered)?);
    }
    Ok(ParsedDocument {
        sections,
        images: Vec::new(),
        page_count: u32::try_from(sheet_count).ok(),
    })
}

/// The non-empty cells of a sheet by row. Read one by one: a sheet's range spans its first and
/// last cells, so two cells at A1 and XFD1048576 would make a range of 17 billion.
fn sheet_rows(
    workbook: &mut Xlsx<Cursor<&[u8]>>,
    name: &str,
    cells: &mut Budget,
    text: &mut Budget,
) -> Result<BTreeMap<u32, Row>, ParseError> {
    let mut reader = workbook.worksheet_cells_reader(name).map_err(invalid)?;
    let mut rows: BTreeMap<u32, Row> = BTreeMap::new();
    while let Some(cell) = reader.next_cell().map_err(invalid)? {
        let value = render_cell(&Data::from(cell.get_value().clone()));
        if value.is_empty() {
            continue;
        }
        cells.charge(1)?;
        text.charge(value.len())?;
        let (row, column) = cell.get_position();
        rows.entry(row).or_default().push((column as usize, value));
    }
    // Writers store cells in order, but nothing makes them; the last of a repeated cell wins.
    for row in rows.values_mut() {
        row.reverse();
        row.sort_by_key(|(column, _)| *column);
        row.dedup_by_key(|(column, _)| *column);
    }
    Ok(rows)
}

/// Unpacks every part once, within the document's budget, before calamine sees the file:
/// calamine reads whole parts and trusts their counts (it reserves room for the strings the
/// shared string table declares), so anything it could choke on is refused here first.
fn check_package(bytes: &[u8], limits: &Limits) -> Result<(), ParseError> {
    let mut entries = ZipEntries::with_budget(bytes, limits.unpacked())
        .map_err(|err| ParseError(format!("not a valid xlsx file: {err}")))?;
    for index in 0..entries.len() {
        let (name, entry) = entries
            .read_index(index, limits.unpacked_bytes)
            .map_err(|err| ParseError(format!("not a valid xlsx file: {err}")))?;
        let xml = match entry {
            Entry::Bytes(xml) => xml,
            Entry::TooLarge => return Err(entries.budget().exceeded()),
            Entry::Missing => continue,
        };
        let lower = name.to_ascii_lowercase();
        if lower.ends_with("sharedstrings.xml") {
            check_count(
                &name,
                &xml,
                &["si"],
                Some("uniqueCount"),
                limits.cells,
                "shared strings",
            )?;
        } else if lower.ends_with("styles.xml") {
            check_count(&name, &xml, &["xf", "numFmt"], None, MAX_STYLES, "cell formats")?;
        }
    }
    Ok(())
}

/// Counts the elements called `names` in `xml` (the part `part`), and the numbers the `declared`
/// attribute claims, against `max`. The attribute is checked on every element, not only the
/// root: calamine reserves for the first `sst` element wherever it stands, behind decoys.
fn check_count(
    part: &str,
    xml: &[u8],
    names: &[&str],
    declared: Option<&str>,
    max: usize,
    what: &'static str,
) -> Result<(), ParseError> {
    let too_many = || {
        ParseError(format!(
            "the workbook is too large to index: it has more than {max} {what}"
        ))
    };
    let mut reader = quick_xml::Reader::from_reader(xml);
    // As lenient as calamine's reader: an error here that calamine reads past would stop the count.
    let config = reader.config_mut();
    config.check_end_names = false;
    config.check_comments = false;
    let mut count = 0usize;
    loop {
        // Refused rather than left to calamine: what it reads past an error here would be uncounted.
        let event = reader
            .read_event()
            .map_err(|err| ParseError(format!("not a valid xlsx file: broken XML in {part}: {err}")))?;
        let element = match event {
            Event::Start(element) | Event::Empty(element) => element,
            Event::Eof => return Ok(()),
            _ => continue,
        };
        if let Some(declared) = declared {
            // Unchecked: a repeated attribute before it would hide it from a checked walk.
            let claims_too_many = element
                .attributes()
                .with_checks(false)
                .flatten()
                .filter(|attribute| attribute.key.0 == declared)
                .filter_map(|attribute| attribute.value.trim().parse::<u128>().ok())
                .any(|claimed| claimed > max as u128);
            if claims_too_many {
                return Err(too_many());
            }
        }
        if names.iter().any(|name| element.local_name().as_ref() == *name) {
            count += 1;
            if count > max {
                return Err(too_many());
            }
        }
    }
}

fn invalid(err: calamine::XlsxError) -> ParseError {
    ParseError(format!("not a valid xlsx file: {err}"))
}

fn render_cell(cell: &Data) -> String {
    match cell {
        Data::Int(value) => value.to_string(),
        Data::Float(value) => render_number(*value),
        Data::String(text) | Data::DateTimeIso(text) | Data::DurationIso(text) => text.clone(),
        Data::Bool(value) => if *value { "TRUE" } else { "FALSE" }.to_owned(),
        Data::DateTime(value) => render_date_time(value),
        // "#DIV/0!" and friends say nothing about the content.
        Data::Error(_) | Data::Empty => String::new(),
    }
}

/// At most 15 significant digits, as Excel shows them, so binary noise such as
/// 0.30000000000000004 reads 0.3; whole numbers without ".0".
fn render_number(value: f64) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    let rounded: f64 = format!("{value:.14e}").parse().unwrap_or(value);
    // Display of f64 never uses an exponent and drops ".0" from whole numbers.
    rounded.to_string()
}

fn render_date_time(value: &ExcelDateTime) -> String {
    if value.is_duration() {
        let total_seconds = (value.as_f64() * 86_400.0).round() as i64;
        let sign = if total_seconds < 0 { "-" } else { "" };
        let seconds = total_seconds.unsigned_abs();
        return format!("{sign}{}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60);
    }
    let (year, month, day, hour, minute, second, _) = value.to_ymd_hms_milli();
    let time_of_day = (hour, minute, second) != (0, 0, 0);
    if value.as_f64().abs() < 1.0 && time_of_day {
        format!("{hour:02}:{minute:02}:{second:02}")
    } else if time_of_day {
        format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}")
    } else {
        format!("{year:04}-{month:02}-{day:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::document::SectionKind;
    use crate::rag::parse::fixtures;
    use calamine::ExcelDateTimeType;

    fn cells(rows: &[&[&str]]) -> Vec<Vec<String>> {
        rows.iter()
            .map(|row| row.iter().map(|c| c.to_string()).collect())
            .collect()
    }

    #[test]
    fn every_sheet_is_read() {
        let bytes = fixtures::xlsx(&[
            ("People", cells(&[&["Name", "Age"], &["Ann", "31"], &["Bob", "42.5"]])),
            ("Empty", Vec::new()),
            (
                "Cities",
                cells(&[&["City", "Country"], &["Oslo", "Norway"], &["", ""], &["Lima", "Peru"]]),
            ),
        ]);
        let document = parse(&bytes).unwrap();
        assert_eq!(document.page_count, Some(3));
        let got: Vec<_> = document
            .sections
            .iter()
            .map(|s| (s.kind, s.title.as_deref().unwrap_or_default(), s.text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (SectionKind::Table, "People", "Name: Ann; Age: 31\nName: Bob; Age: 42.5"),
                (
                    SectionKind::Table,
                    "Cities",
                    "City: Oslo; Country: Norway\nCity: Lima; Country: Peru"
                ),
            ]
        );
    }

    #[test]
    fn numbers_read_like_excel_shows_them() {
        assert_eq!(render_number(3.0), "3");
        assert_eq!(render_number(-1250000.0), "-1250000");
        assert_eq!(render_number(0.1 + 0.2), "0.3");
        assert_eq!(render_number(2.5), "2.5");
        assert_eq!(render_cell(&Data::Bool(true)), "TRUE");
    }

    #[test]
    fn dates_and_times_are_readable() {
        let date = |value, kind| render_cell(&Data::DateTime(ExcelDateTime::new(value, kind, false)));
        assert_eq!(date(45943.0, ExcelDateTimeType::DateTime), "2025-10-13");
        assert_eq!(date(45943.5, ExcelDateTimeType::DateTime), "2025-10-13 12:00:00");
        assert_eq!(date(0.75, ExcelDateTimeType::DateTime), "18:00:00");
        assert_eq!(date(1.5, ExcelDateTimeType::TimeDelta), "36:00:00");
        assert_eq!(date(-0.5, ExcelDateTimeType::TimeDelta), "-12:00:00");
    }

    fn workbook_with_sheet(sheet_data: &str) -> Vec<u8> {
        let sheet = format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><dimension ref="A1:XFD1048576"/><sheetData>{sheet_data}</sheetData></worksheet>"#
        );
        let base = fixtures::xlsx(&[("Sheet", cells(&[&["Name"], &["x"]]))]);
        fixtures::with_zip_entry(&base, "xl/worksheets/sheet1.xml", sheet.as_bytes())
    }

    #[test]
    fn two_cells_at_opposite_corners_cost_two_cells() {
        // Read as a range, this sheet is 17 billion cells: the allocation aborts the process.
        let bytes = workbook_with_sheet(
            r#"<row r="1"><c r="A1" t="inlineStr"><is><t>Name</t></is></c></row><row r="1048576"><c r="A1048576" t="inlineStr"><is><t>Ann</t></is></c><c r="XFD1048576"><v>7</v></c></row>"#,
        );
        assert!(bytes.len() < 4096, "the hostile file is small: {}", bytes.len());
        let document = parse(&bytes).unwrap();
        assert_eq!(document.sections.len(), 1);
        assert_eq!(document.sections[0].text, "Name: Ann; column 16384: 7");
    }

    #[test]
    fn cells_out_of_order_are_read_in_order() {
        let bytes = workbook_with_sheet(
            r#"<row r="2"><c r="B2"><v>2</v></c><c r="A2"><v>1</v></c></row><row r="1"><c r="A1" t="inlineStr"><is><t>a</t></is></c><c r="B1" t="inlineStr"><is><t>b</t></is></c></row>"#,
        );
        assert_eq!(parse(&bytes).unwrap().sections[0].text, "a: 1; b: 2");
    }

    fn small(cells: usize, text_bytes: usize, unpacked_bytes: usize) -> Limits {
        Limits {
            unpacked_bytes,
            cells,
            text_bytes,
        }
    }

    #[test]
    fn a_workbook_over_the_cell_limit_is_refused() {
        let rows: String = (1..=11)
            .map(|row| format!(r#"<row r="{row}"><c r="A{row}"><v>1</v></c></row>"#))
            .collect();
        let bytes = workbook_with_sheet(&rows);
        assert!(parse_within(&bytes, &small(11, 1 << 20, 1 << 20)).is_ok());
        let err = parse_within(&bytes, &small(10, 1 << 20, 1 << 20))
            .unwrap_err()
            .to_string();
        assert!(err.contains("number of cells exceeds the limit of 10"), "{err}");
    }

    #[test]
    fn a_shared_string_table_claiming_billions_is_refused_before_calamine_reserves_for_it() {
        let base = fixtures::xlsx(&[("Sheet", cells(&[&["Name"], &["Ann"]]))]);
        let strings = br#"<?xml version="1.0" encoding="UTF-8"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="1" uniqueCount="99999999999999"><si><t>Name</t></si><si><t>Ann</t></si></sst>"#;
        let bytes = fixtures::with_zip_entry(&base, "xl/sharedStrings.xml", strings);
        let err = parse(&bytes).unwrap_err().to_string();
        assert!(err.contains("more than 2000000 shared strings"), "{err}");
        // Behind a decoy element, or a repeated attribute, the claim is still seen.
        for strings in [
            r#"<x/><sst uniqueCount="100000000000"><si><t>a</t></si></sst>"#,
            r#"<r><sst uniqueCount="100000000000"><si><t>a</t></si></sst></r>"#,
            r#"<sst a="1" a="2" uniqueCount="100000000000"><si><t>a</t></si></sst>"#,
        ] {
            let bytes = fixtures::with_zip_entry(&base, "xl/sharedStrings.xml", strings.as_bytes());
            let err = parse(&bytes).unwrap_err().to_string();
            assert!(err.contains("more than 2000000 shared strings"), "{strings}: {err}");
        }
        // Counted as well as declared: a table may understate its size.
        let many: String = (0..11).map(|i| format!("<si><t>{i}</t></si>")).collect();
        let strings = format!(r#"<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">{many}</sst>"#);
        let bytes = fixtures::with_zip_entry(&base, "xl/sharedStrings.xml", strings.as_bytes());
        let err = parse_within(&bytes, &small(10, 1 << 20, 1 << 20))
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than 10 shared strings"), "{err}");
    }

    #[test]
    fn one_shared_string_in_every_cell_stops_at_the_text_limit() {
        let base = fixtures::xlsx(&[("Sheet", cells(&[&["Name"], &["Ann"]]))]);
        let long = "x".repeat(1000);
        let strings = format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><si><t>{long}</t></si></sst>"#
        );
        let rows: String = (1..=200)
            .map(|row| format!(r#"<row r="{row}"><c r="A{row}" t="s"><v>0</v></c></row>"#))
            .collect();
        let with_strings = fixtures::with_zip_entry(&base, "xl/sharedStrings.xml", strings.as_bytes());
        let sheet = format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>{rows}</sheetData></worksheet>"#
        );
        let bytes = fixtures::with_zip_entry(&with_strings, "xl/worksheets/sheet1.xml", sheet.as_bytes());
        assert!(bytes.len() < 4096, "a small file: {}", bytes.len());
        let err = parse_within(&bytes, &small(1000, 100_000, 1 << 20))
            .unwrap_err()
            .to_string();
        assert!(err.contains("text exceeds the limit of 100000"), "{err}");
    }

    #[test]
    fn parts_over_the_unpacked_limit_together_are_refused() {
        let base = fixtures::xlsx(&[("Sheet", cells(&[&["Name"], &["Ann"]]))]);
        let padding = vec![b' '; 60_000];
        let bytes = fixtures::with_zip_entry(&base, "xl/padding1.xml", &padding);
        let bytes = fixtures::with_zip_entry(&bytes, "xl/padding2.xml", &padding);
        assert!(parse_within(&bytes, &small(1000, 1 << 20, 200_000)).is_ok());
        // Each part fits; the two together do not.
        let err = parse_within(&bytes, &small(1000, 1 << 20, 100_000))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unpacked size exceeds the limit of 100000"), "{err}");
    }

    #[test]
    fn a_broken_zip_is_reported() {
        let err = parse(b"PK\x03\x04 not really").unwrap_err();
        assert!(err.to_string().starts_with("not a valid xlsx file"), "{err}");
    }
}
