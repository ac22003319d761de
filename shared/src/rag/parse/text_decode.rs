//! Bytes of a text format (txt, md, csv, html) to a string.

use super::ParseError;

/// Above this share of undecodable or control characters the file is binary, not text in some
/// other encoding: indexing it would only fill the knowledge base with noise.
const MAX_BINARY_SHARE: f64 = 0.05;

/// Decodes text: by its byte-order mark (UTF-8, UTF-16); else as UTF-8 when it is UTF-8 (or
/// nearly: fewer invalid sequences than valid non-ASCII characters, the invalid ones becoming
/// U+FFFD so one bad byte does not lose the file); else in the legacy encoding its bytes read as (GBK,
/// Big5, Shift_JIS, EUC-KR, Windows-1252 ..., guessed by `chardetng`): a CSV from Excel in a
/// Chinese locale is GBK. Text is refused only when it is mostly control characters or
/// undecodable. Control characters are dropped from what is returned: valid UTF-8 often
/// carries C1 controls from text decoded twice ("â\u{80}\u{9c}"), which mean nothing in a
/// passage.
pub(super) fn decode(bytes: &[u8]) -> Result<String, ParseError> {
    let text = match encoding_rs::Encoding::for_bom(bytes) {
        Some((encoding, bom_length)) => encoding.decode_without_bom_handling(&bytes[bom_length..]).0,
        None => match std::str::from_utf8(bytes) {
            Ok(text) => text.into(),
            Err(_) => {
                let lossy = String::from_utf8_lossy(bytes);
                // Text in a legacy encoding rarely forms valid UTF-8 sequences (about one GBK
                // character in twelve does): more bad sequences than good ones is not UTF-8.
                let (bad, good) = lossy.chars().filter(|c| !c.is_ascii()).fold((0, 0), |(bad, good), c| {
                    match c == char::REPLACEMENT_CHARACTER {
                        true => (bad + 1, good),
                        false => (bad, good + 1),
                    }
                });
                if bad > good {
                    let mut detector = chardetng::EncodingDetector::new();
                    detector.feed(bytes, true);
                    detector.guess(None, false).decode_without_bom_handling(bytes).0
                } else {
                    lossy
                }
            }
        },
    };
    if share(&text, is_binary) > MAX_BINARY_SHARE {
        return Err(ParseError::new(
            "the file does not look like text (binary data or an unsupported encoding); save it as UTF-8",
        ));
    }
    Ok(text.chars().filter(|&c| !is_dropped(c)).collect())
}

/// The share of `text`'s characters for which `f` holds.
fn share(text: &str, f: impl Fn(char) -> bool) -> f64 {
    let (mut total, mut hits) = (0usize, 0usize);
    for c in text.chars() {
        total += 1;
        hits += usize::from(f(c));
    }
    if total == 0 {
        0.0
    } else {
        hits as f64 / total as f64
    }
}

/// Characters that text files do not hold: C0 controls other than layout, and U+FFFD.
fn is_binary(c: char) -> bool {
    c == char::REPLACEMENT_CHARACTER || (c < ' ' && !matches!(c, '\t' | '\n' | '\r' | '\x0c'))
}

/// Controls other than layout (C0, DEL and C1): dropped before chunking.
pub(super) fn is_dropped(c: char) -> bool {
    c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c')
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
    fn a_stray_invalid_byte_in_utf8_text_is_replaced() {
        let mut bytes = b"caf\xE9 ".to_vec();
        bytes.extend_from_slice("and a few valid accents around it: naïve, señor, brûlée".as_bytes());
        let text = decode(&bytes).unwrap();
        assert_eq!(
            text,
            "caf\u{FFFD} and a few valid accents around it: naïve, señor, brûlée"
        );
    }

    #[test]
    fn legacy_east_asian_text_is_decoded_in_its_encoding() {
        let cases = [
            (
                encoding_rs::GBK,
                "商品,价格,数量\n苹果,3.50,12\n香蕉,2.10,30\n橙子,4.00,8\n",
            ),
            (
                encoding_rs::BIG5,
                "這是一份繁體中文的文件，內容是關於產品的價格與數量。",
            ),
            (
                encoding_rs::SHIFT_JIS,
                "パスワードを忘れた場合は、管理者に連絡してください。",
            ),
            (encoding_rs::EUC_KR, "비밀번호를 잊어버린 경우 관리자에게 문의하십시오."),
        ];
        for (encoding, text) in cases {
            let (bytes, _, unmappable) = encoding.encode(text);
            assert!(!unmappable, "{}", encoding.name());
            assert_eq!(decode(&bytes).unwrap(), text, "{}", encoding.name());
        }
        // Mostly ASCII, a few Chinese names: the names are kept, not replaced.
        let mixed = "id,name,city\n1,Alice,London\n2,Bob,Paris\n3,王伟,北京\n4,Carol,Berlin\n";
        let (bytes, _, _) = encoding_rs::GBK.encode(mixed);
        assert_eq!(decode(&bytes).unwrap(), mixed);
    }

    #[test]
    fn binary_is_refused() {
        let err = decode(b"\0\x01\x02\x03\xFF\xFEabc").unwrap_err();
        assert!(err.to_string().contains("does not look like text"), "{err}");
    }

    #[test]
    fn valid_utf8_with_c1_controls_is_text() {
        // A passage of a public web corpus: a curly quote decoded twice.
        let text = decode("He said \u{e2}\u{80}\u{9c}hello\u{e2}\u{80}\u{9d} twice".as_bytes()).unwrap();
        assert_eq!(text, "He said \u{e2}hello\u{e2} twice");
        // Even when the controls are many: valid UTF-8 is text.
        let dense = "\u{e2}\u{80}\u{9c}".repeat(50);
        assert_eq!(decode(dense.as_bytes()).unwrap(), "\u{e2}".repeat(50));
    }

    #[test]
    fn legacy_single_byte_text_is_decoded() {
        // Windows-1252 / Latin-1: every accented letter is an invalid UTF-8 byte.
        let text = decode(b"Caf\xE9 cr\xE8me br\xFBl\xE9e \x93quoted\x94").unwrap();
        assert_eq!(text, "Café crème brûlée \u{201c}quoted\u{201d}");
        // One accented letter in ASCII text is that letter, not a replacement.
        let text = decode(b"caf\xE9 and plenty of plain text around it").unwrap();
        assert_eq!(text, "café and plenty of plain text around it");
    }

    #[test]
    fn mostly_control_characters_is_refused() {
        let mut bytes = b"text ".to_vec();
        bytes.extend(std::iter::repeat_n(0x01u8, 20));
        assert!(decode(&bytes).is_err());
    }
}
