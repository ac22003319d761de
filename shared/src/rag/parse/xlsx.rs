//! Excel workbooks (.xlsx): every worksheet as a table titled with the sheet name. Chart, dialog and
//! macro sheets hold no cells and are skipped, as are empty worksheets.

use std::io::Cursor;

use calamine::{Data, ExcelDateTime, Reader, SheetType, Xlsx};

use super::{table_rows, ParseError};
use crate::rag::document::ParsedDocument;

pub(super) fn parse(bytes: &[u8]) -> Result<ParsedDocument, ParseError> {
    let mut workbook = Xlsx::new(Cursor::new(bytes)).map_err(invalid)?;
    let sheet_count = workbook.sheets_metadata().len();
    let worksheets: Vec<String> = workbook
        .sheets_metadata()
        .iter()
        .filter(|sheet| sheet.typ == SheetType::WorkSheet)
        .map(|sheet| sheet.name.clone())
        .collect();
    let mut sections = Vec::new();
    for name in worksheets {
        let range = workbook.worksheet_range(&name).map_err(invalid)?;
        let rows = range
            .rows()
            .map(|row| row.iter().map(render_cell).collect::<Vec<_>>())
            .filter(|row| row.iter().any(|cell| !cell.is_empty()));
        sections.extend(table_rows::sections(&name, rows));
    }
    Ok(ParsedDocument {
        sections,
        images: Vec::new(),
        page_count: u32::try_from(sheet_count).ok(),
    })
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

    #[test]
    fn a_broken_zip_is_reported() {
        let err = parse(b"PK\x03\x04 not really").unwrap_err();
        assert!(err.to_string().starts_with("not a valid xlsx file"), "{err}");
    }
}
