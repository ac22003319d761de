//! CSV: the first row is the header, each data row becomes a "header: value" line.

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
    let rows = reader
        .records()
        .map(|record| record.map(|record| table_rows::dense(record.iter().map(str::to_owned))))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| ParseError(format!("not a valid CSV file: {err}")))?;
    Ok(ParsedDocument {
        sections: table_rows::sections(file_name, rows.into_iter(), &mut Limits::DOCUMENT.text())?,
        ..ParsedDocument::default()
    })
}

/// Spreadsheet exports in many locales separate with ';' or tabs: pick whichever candidate the
/// header line uses most, ',' when it uses none.
fn delimiter(text: &str) -> u8 {
    let header = text.lines().next().unwrap_or_default();
    [b',', b';', b'\t', b'|']
        .into_iter()
        .max_by_key(|&candidate| (header.bytes().filter(|&b| b == candidate).count(), candidate == b','))
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

    #[test]
    fn semicolons_and_tabs_are_detected() {
        let document = parse("a.csv", "a;b\n1,5;2".as_bytes()).unwrap();
        assert_eq!(document.sections[0].text, "a: 1,5; b: 2");
        let document = parse("a.csv", "a\tb\n1\t2".as_bytes()).unwrap();
        assert_eq!(document.sections[0].text, "a: 1; b: 2");
    }

    #[test]
    fn ragged_rows_are_kept() {
        let document = parse("a.csv", "a,b\n1\n1,2,3".as_bytes()).unwrap();
        assert_eq!(document.sections[0].text, "a: 1\na: 1; b: 2; column 3: 3");
    }
}
