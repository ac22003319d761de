//! CSV: the first row is the header (but for a title above it), each data row becomes a
//! "header: value" line.

use super::limits::Limits;
use super::{table_rows, text_decode, ParseError};
use crate::rag::document::ParsedDocument;

pub(super) fn parse(file_name: &str, bytes: &[u8]) -> Result<ParsedDocument, ParseError> {
    let text = text_decode::decode(bytes)?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter(&text))
        .from_reader(text.as_bytes());
    // Rows are rendered as they are read, their empty cells left out: collected first, a file
    // of empty cells (",,,\n" a million times) took some 100 bytes a cell before any limit.
    let mut failed = None;
    let rows = reader.records().map_while(|record| match record {
        Ok(record) => Some(
            record
                .iter()
                .enumerate()
                .filter(|(_, cell)| !cell.is_empty())
                .map(|(column, cell)| (column, cell.to_owned()))
                .collect(),
        ),
        Err(err) => {
            failed = Some(err);
            None
        }
    });
    let sections = table_rows::sections(file_name, rows, &mut Limits::DOCUMENT.text())?;
    if let Some(err) = failed {
        return Err(ParseError(format!("not a valid CSV file: {err}")));
    }
    Ok(ParsedDocument {
        sections,
        ..ParsedDocument::default()
    })
}

/// Spreadsheet exports in many locales separate with ';' or tabs. A separator splits every row
/// of a table the same number of times, where commas inside values (decimals, lists) and in a
/// title above the table do not: the candidate that does so over the most of the first lines,
/// counted from the last of them up, is taken ("Sales, Q3" above `;` rows, `1,5;2,5` under
/// `x;y`, tabs around `red, green`); ',' when none appears.
fn delimiter(text: &str) -> u8 {
    let first_lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).take(5).collect();
    let steady_lines = |candidate: u8| -> usize {
        let counts: Vec<usize> = first_lines
            .iter()
            .map(|line| line.bytes().filter(|&b| b == candidate).count())
            .collect();
        match counts.last() {
            Some(&last) if last > 0 => counts.iter().rev().take_while(|&&n| n == last).count(),
            _ => 0,
        }
    };
    [b',', b';', b'\t', b'|']
        .into_iter()
        .max_by_key(|&candidate| (steady_lines(candidate), candidate == b','))
        .unwrap_or(b',')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rag::document::SectionKind;

    #[test]
    fn rows_are_rendered_under_the_file_name() {
        let source = "name,quote,age\nAnn,\"Hello, world\",31\nBob,\"say \"\"hi\"\"\",42\n";
        let document = parse("people.csv", source.as_bytes()).unwrap();
        assert_eq!(document.sections.len(), 1);
        let section = &document.sections[0];
        assert_eq!(section.kind, SectionKind::Table);
        assert_eq!(section.title.as_deref(), Some("people.csv"));
        assert_eq!(
            section.text,
            "name: Ann; quote: Hello, world; age: 31\nname: Bob; quote: say \"hi\"; age: 42"
        );
    }

    /// Rows of nothing but separators cost nothing and say nothing; the rows around them
    /// keep their columns' names.
    #[test]
    fn empty_cells_and_rows_are_left_out() {
        let source = format!("a,b,c\n{}1,,3\n,,\n,2,\n", ",,\n".repeat(100_000));
        let document = parse("sparse.csv", source.as_bytes()).unwrap();
        assert_eq!(document.sections.len(), 1);
        assert_eq!(document.sections[0].text, "a: 1; c: 3\nb: 2");
    }

    #[test]
    fn semicolons_and_tabs_are_detected() {
        let document = parse("a.csv", "a;b\n1,5;2".as_bytes()).unwrap();
        assert_eq!(document.sections[0].text, "a: 1,5; b: 2");
        let document = parse("a.csv", "x;y\n1,5;2,5\n3,1;4,2".as_bytes()).unwrap();
        assert_eq!(document.sections[0].text, "x: 1,5; y: 2,5\nx: 3,1; y: 4,2");
        let tsv = "name\tcolours\nWidget\tred, green, blue\nGadget\tsmall, light";
        let document = parse("a.csv", tsv.as_bytes()).unwrap();
        assert_eq!(
            document.sections[0].text,
            "name: Widget; colours: red, green, blue\nname: Gadget; colours: small, light"
        );
        let document = parse("a.csv", "a\tb\n1\t2".as_bytes()).unwrap();
        assert_eq!(document.sections[0].text, "a: 1; b: 2");
    }

    #[test]
    fn a_title_line_above_the_table_captions_it_and_does_not_pick_the_separator() {
        let source = "Sales, Q3 2026\nregion;revenue\nNorth;12,5\nSouth;7\n";
        let document = parse("sales.csv", source.as_bytes()).unwrap();
        let section = &document.sections[0];
        assert_eq!(section.title.as_deref(), Some("sales.csv > Sales, Q3 2026"));
        assert_eq!(section.text, "region: North; revenue: 12,5\nregion: South; revenue: 7");
    }

    #[test]
    fn ragged_rows_are_kept() {
        let document = parse("a.csv", "a,b\n1\n1,2,3".as_bytes()).unwrap();
        assert_eq!(document.sections[0].text, "a: 1\na: 1; b: 2; column 3: 3");
    }
}
