//! Text that came from elsewhere (a model, a tool, a converter, an uploader) as the service
//! stores or shows it: cut to a bounded number of characters, never inside one, and the
//! characters that hide how a name reads.

/// Characters that change how the rest of a name reads without showing themselves: bidi
/// overrides, embeddings and isolates (`invoice\u{202E}fdp.exe` shows as "invoiceexe.pdf"),
/// direction marks, zero-width characters and the byte order mark.
pub fn hidden(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// The first `max` characters of `text`, or all of it when it is no longer.
pub fn prefix_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// Text a model sent, as the service can store it: without NUL characters, which Postgres text
/// cannot hold (an answer with one could not be stored, and was lost whole).
pub fn model_text(text: &str) -> String {
    match text.contains('\0') {
        true => text.replace('\0', ""),
        false => text.to_owned(),
    }
}

/// Text from another system made fit to show in one line of an error: control characters
/// (line breaks included) become spaces, and at most `max` characters are kept, with an
/// ellipsis saying that more was cut.
pub fn excerpt(text: &str, max: usize) -> String {
    let kept = prefix_chars(text, max);
    let mut out: String = kept.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if kept.len() < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_counts_characters_not_bytes() {
        assert_eq!(prefix_chars("héllo", 2), "hé");
        assert_eq!(prefix_chars("héllo", 5), "héllo");
        assert_eq!(prefix_chars("héllo", 50), "héllo");
        assert_eq!(prefix_chars("", 3), "");
    }

    #[test]
    fn model_text_holds_no_nul() {
        assert_eq!(model_text("a\0b\0"), "ab");
        assert_eq!(model_text("plain"), "plain");
    }

    #[test]
    fn excerpt_is_one_bounded_line() {
        assert_eq!(excerpt("bad\nfile\u{1b}[31m", 100), "bad file [31m");
        assert_eq!(excerpt("ééééé", 3), "ééé…");
        assert_eq!(excerpt("short", 5), "short");
    }
}
