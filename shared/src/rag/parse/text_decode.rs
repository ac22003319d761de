//! Bytes of a text format (txt, md, csv, html) to a string.

use super::ParseError;

/// Above this share of undecodable or control characters the file is binary, not text in some
/// other encoding: indexing it would only fill the knowledge base with noise.
const MAX_BINARY_SHARE: f64 = 0.05;

/// Decodes UTF-8, or UTF-16 when a byte-order mark says so, dropping the mark. Invalid UTF-8
/// sequences become U+FFFD so one bad byte does not lose the whole file.
pub(super) fn decode(bytes: &[u8]) -> Result<String, ParseError> {
    let text = match encoding_rs::Encoding::for_bom(bytes) {
        Some((encoding, bom_length)) => encoding.decode_without_bom_handling(&bytes[bom_length..]).0,
        None => String::from_utf8_lossy(bytes),
    };
    let total = text.chars().count();
    let suspicious = text.chars().filter(|&c| is_suspicious(c)).count();
    if total > 0 && suspicious as f64 > total as f64 * MAX_BINARY_SHARE {
        return Err(ParseError::new(
            "the file does not look like text (binary data or an unsupported encoding); save it as UTF-8",
        ));
    }
    Ok(text.into_owned())
}

fn is_suspicious(c: char) -> bool {
    c == char::REPLACEMENT_CHARACTER || (c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_order_marks_are_stripped() {
        assert_eq!(decode(b"\xEF\xBB\xBFhello").unwrap(), "hello");
        assert_eq!(decode(b"\xFF\xFEh\0i\0").unwrap(), "hi");
        assert_eq!(decode(b"\xFE\xFF\0h\0i").unwrap(), "hi");
    }

    #[test]
    fn a_stray_invalid_byte_is_replaced() {
        let mut bytes = b"caf\xE9 ".to_vec();
        bytes.extend_from_slice("and plenty of valid text around it".as_bytes());
        let text = decode(&bytes).unwrap();
        assert!(text.starts_with("caf\u{FFFD} and"), "{text}");
    }

    #[test]
    fn binary_is_refused() {
        let err = decode(b"\0\x01\x02\x03\xFF\xFEabc").unwrap_err();
        assert!(err.to_string().contains("does not look like text"), "{err}");
    }
}
