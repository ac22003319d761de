//! Rows of a CSV file or a sheet as "header: value" lines, grouped into table sections.
//!
//! Naming each value by its column keeps a row meaningful on its own once the chunker has cut the
//! table apart from its header.

use crate::rag::document::{Section, SectionKind};

/// Rows per section, so a large table is not one giant section.
const ROWS_PER_SECTION: usize = 50;

/// Turns a table whose first row is the header into sections titled `title`. Empty cells are left
/// out; a column without a header is called "column N".
pub(super) fn sections(title: &str, mut rows: impl Iterator<Item = Vec<String>>) -> Vec<Section> {
    let Some(header) = rows.next() else {
        return Vec::new();
    };
    let lines: Vec<String> = rows.filter_map(|row| render_row(&header, &row)).collect();
    lines
        .chunks(ROWS_PER_SECTION)
        .map(|chunk| Section {
            kind: SectionKind::Table,
            text: chunk.join("\n"),
            title: Some(title.to_owned()),
            page: None,
        })
        .collect()
}

fn render_row(header: &[String], row: &[String]) -> Option<String> {
    let fields: Vec<String> = row
        .iter()
        .enumerate()
        .filter_map(|(i, value)| {
            let value = one_line(value);
            if value.is_empty() {
                return None;
            }
            let name = header.get(i).map(|name| one_line(name)).unwrap_or_default();
            let name = if name.is_empty() {
                format!("column {}", i + 1)
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

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| c.to_string()).collect()
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
        let got = sections("people.csv", rows.into_iter());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].kind, SectionKind::Table);
        assert_eq!(got[0].title.as_deref(), Some("people.csv"));
        assert_eq!(
            got[0].text,
            "Name: Ann; City: Oslo; column 3: x\nName: Bob\nName: Cy; City: New York"
        );
    }

    #[test]
    fn big_tables_are_split() {
        let rows = std::iter::once(row(&["n"])).chain((0..120).map(|i| vec![i.to_string()]));
        let got = sections("t", rows);
        let lengths: Vec<_> = got.iter().map(|s| s.text.lines().count()).collect();
        assert_eq!(lengths, [50, 50, 20]);
        assert!(got[2].text.ends_with("n: 119"));
    }
}
