//! Rows of a CSV file or a sheet as "header: value" lines, grouped into table sections.
//!
//! Naming each value by its column keeps a row meaningful on its own once the chunker has cut the
//! table apart from its header.

use super::limits::Budget;
use super::outline::MAX_TITLE_PART_CHARS;
use super::ParseError;
use crate::rag::document::{Section, SectionKind};
use crate::text::excerpt;

/// Rows per section, so a large table is not one giant section.
const ROWS_PER_SECTION: usize = 50;

/// A row as (0-based column, value) pairs in column order. Sparse, because a sheet may hold a
/// cell in its last column: spelling out the empty ones would cost 16384 strings per row.
pub(super) type Row = Vec<(usize, String)>;

/// Rows above a table with one cell each (a sheet's title in A1, a date under it): when a wider
/// row follows within this many, with another wide row under it, they caption the table rather
/// than name its first column.
const MAX_CAPTION_ROWS: usize = 3;

/// Turns a table into sections titled `title`: its first row is the header, but for caption rows
/// above it, which join the title. Empty cells are left out; a column without a header is called
/// "column N"; a table of a header alone is kept as that one line. The header is repeated in
/// every row, so a long header over many rows multiplies: the rendered text is charged to `text`.
pub(super) fn sections(
    title: &str,
    rows: impl Iterator<Item = Row>,
    text: &mut Budget,
) -> Result<Vec<Section>, ParseError> {
    let mut rows = rows.filter(|row| filled(row) > 0);
    // A wide row is a header under captions only when a wide row follows it: alone (last, or
    // among one-cell rows) it is a data row with a note beside it, under a narrower header.
    let mut ahead: Vec<Row> = rows.by_ref().take(MAX_CAPTION_ROWS + 2).collect();
    let captions = match ahead.iter().position(|row| filled(row) > 1) {
        Some(at) if at <= MAX_CAPTION_ROWS && ahead.get(at + 1).is_some_and(|next| filled(next) > 1) => at,
        _ => 0,
    };
    let caption: Vec<String> = ahead.drain(..captions).map(|row| cells(&row).join(" ")).collect();
    let mut rows = ahead.into_iter().chain(rows);
    let Some(header) = rows.next() else {
        return Ok(Vec::new());
    };
    // Repeated in every section, as a heading is.
    let mut title = excerpt(title, MAX_TITLE_PART_CHARS);
    if !caption.is_empty() {
        title = format!("{title} > {}", excerpt(&caption.join("; "), MAX_TITLE_PART_CHARS));
    }
    let mut lines = Vec::new();
    for row in rows {
        if let Some(line) = render_row(&header, &row) {
            text.charge(line.len() + 1)?;
            lines.push(line);
        }
    }
    if lines.is_empty() {
        let line = cells(&header).join("; ");
        text.charge(line.len())?;
        lines.push(line);
    }
    Ok(lines
        .chunks(ROWS_PER_SECTION)
        .map(|chunk| Section {
            kind: SectionKind::Table,
            text: chunk.join("\n"),
            title: Some(title.clone()),
            page: None,
        })
        .collect())
}

/// The row's cells that hold something, each on one line.
fn cells(row: &Row) -> Vec<String> {
    row.iter()
        .map(|(_, value)| one_line(value))
        .filter(|value| !value.is_empty())
        .collect()
}

/// How many of the row's cells hold something.
fn filled(row: &Row) -> usize {
    row.iter().filter(|(_, value)| !value.trim().is_empty()).count()
}

fn render_row(header: &Row, row: &Row) -> Option<String> {
    let fields: Vec<String> = row
        .iter()
        .filter_map(|(column, value)| {
            let value = one_line(value);
            if value.is_empty() {
                return None;
            }
            let name = header
                .binary_search_by_key(column, |(header_column, _)| *header_column)
                .ok()
                .map(|at| one_line(&header[at].1))
                .unwrap_or_default();
            let name = if name.is_empty() {
                format!("column {}", column + 1)
            } else {
                name
            };
            Some(format!("{name}: {value}"))
        })
        .collect();
    (!fields.is_empty()).then(|| fields.join("; "))
}

/// A cell on one line, because a row is one line of the section.
fn one_line(cell: &str) -> String {
    cell.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::parse::limits::Limits;

    /// A dense row: every column, in order.
    fn row(cells: &[&str]) -> Row {
        cells.iter().map(|c| c.to_string()).enumerate().collect()
    }

    fn render(title: &str, rows: impl Iterator<Item = Row>) -> Vec<Section> {
        sections(title, rows, &mut Limits::DOCUMENT.text()).unwrap()
    }

    #[test]
    fn rows_name_their_values() {
        let rows = vec![
            row(&["Name", "City", ""]),
            row(&["Ann", "Oslo", "x"]),
            row(&["Bob", "", ""]),
            row(&["", "", ""]),
            row(&["Cy", "New\nYork"]),
        ];
        let got = render("people.csv", rows.into_iter());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].kind, SectionKind::Table);
        assert_eq!(got[0].title.as_deref(), Some("people.csv"));
        assert_eq!(
            got[0].text,
            "Name: Ann; City: Oslo; column 3: x\nName: Bob\nName: Cy; City: New York"
        );
    }

    #[test]
    fn sparse_rows_find_their_headers() {
        let header = vec![(0, "Id".to_owned()), (16_383, "Last".to_owned())];
        let rows = vec![
            header,
            vec![(0, "1".to_owned()), (7, "g".to_owned()), (16_383, "z".to_owned())],
        ];
        let got = render("s", rows.into_iter());
        assert_eq!(got[0].text, "Id: 1; column 8: g; Last: z");
    }

    #[test]
    fn big_tables_are_split() {
        let rows = std::iter::once(row(&["n"])).chain((0..120).map(|i| row(&[&i.to_string()])));
        let got = render("t", rows);
        let lengths: Vec<_> = got.iter().map(|s| s.text.lines().count()).collect();
        assert_eq!(lengths, [50, 50, 20]);
        assert!(got[2].text.ends_with("n: 119"));
    }

    #[test]
    fn a_title_above_the_table_captions_it() {
        let rows = vec![
            row(&["Sales by region"]),
            row(&[]),
            vec![(1, "Q3 2026".to_owned())],
            row(&["Region", "Revenue"]),
            row(&["North", "12"]),
        ];
        let got = render("Sheet1", rows.into_iter());
        assert_eq!(got[0].title.as_deref(), Some("Sheet1 > Sales by region; Q3 2026"));
        assert_eq!(got[0].text, "Region: North; Revenue: 12");
    }

    #[test]
    fn a_one_column_table_keeps_its_header_and_a_title_row_needs_a_wider_row_soon() {
        let list = vec![row(&["Name"]), row(&["Ann"]), row(&["Bob"])];
        let got = render("t", list.into_iter());
        assert_eq!(got[0].title.as_deref(), Some("t"));
        assert_eq!(got[0].text, "Name: Ann\nName: Bob");
        // A wide row last, or among one-cell rows: a data row with a note beside it.
        let rows = vec![row(&["Name"]), row(&["Ann", "7"])];
        assert_eq!(render("t", rows.into_iter())[0].text, "Name: Ann; column 2: 7");
        let rows = vec![row(&["Email"]), row(&["a@x"]), row(&["b@x", "bounced"]), row(&["c@x"])];
        assert_eq!(
            render("t", rows.into_iter())[0].text,
            "Email: a@x\nEmail: b@x; column 2: bounced\nEmail: c@x"
        );
        // Four one-cell rows before the first wide one: a list, not captions.
        let rows = vec![row(&["a"]), row(&["b"]), row(&["c"]), row(&["d"]), row(&["e", "f"])];
        let got = render("t", rows.into_iter());
        assert_eq!(got[0].title.as_deref(), Some("t"));
        assert_eq!(got[0].text, "a: b\na: c\na: d\na: e; column 2: f");
    }

    #[test]
    fn a_table_of_a_header_alone_is_kept() {
        let got = render("t", vec![row(&["Only", " ", "row"])].into_iter());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text, "Only; row");
        assert!(render("t", vec![row(&[" "])].into_iter()).is_empty());
    }

    #[test]
    fn a_long_header_repeated_over_many_rows_stops_at_the_text_budget() {
        let header = row(&[&"h".repeat(1000)]);
        // An endless table: only the budget can stop it.
        let rows = std::iter::once(header).chain(std::iter::repeat_with(|| row(&["x"])));
        let err = sections("t", rows, &mut Budget::new(100_000, "text")).unwrap_err();
        assert!(err.to_string().contains("text exceeds the limit"), "{err}");
    }
}
