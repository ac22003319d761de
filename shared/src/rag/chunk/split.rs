//! Cuts text into pieces that each fit one chunk: sentences (or lines), then words, then
//! characters. Each piece remembers the whitespace that preceded it, so packed chunks keep the
//! source's spacing, and its token count, so nothing is tokenised twice.

use super::tokens::count_tokens;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Piece<'a> {
    /// Whitespace between the previous piece and this one in the source.
    pub sep: &'a str,
    /// Non-empty; trimmed, except that lines keep their indentation.
    pub text: &'a str,
    pub tokens: usize,
}

/// Paragraphs of `text`: runs of non-blank lines, trimmed.
pub(super) fn paragraphs(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut open: Option<usize> = None;
    let mut end = 0;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            if let Some(start) = open.take() {
                out.push(text[start..end].trim());
            }
        } else {
            open.get_or_insert(pos);
            end = pos + line.len();
        }
        pos += line.len();
    }
    if let Some(start) = open {
        out.push(text[start..end].trim());
    }
    out
}

/// The sentences of `text`, each within `max` tokens.
pub(super) fn sentences(text: &str, max: usize) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    for (sep, sentence) in spans(text, sentence_ends(text)) {
        fit(sep, sentence, count_tokens(sentence), max, &mut out);
    }
    out
}

/// The non-blank lines of `text` (table rows, code), each within `max` tokens. A line keeps its
/// indentation; blank lines end up in the separator of the next line.
pub(super) fn lines(text: &str, max: usize) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut prev_end: Option<usize> = None;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let content = line.trim_end();
        if !content.trim_start().is_empty() {
            let sep = prev_end.map_or("", |end| &text[end..pos]);
            fit(sep, content, count_tokens(content), max, &mut out);
            prev_end = Some(pos + content.len());
        }
        pos += line.len();
    }
    out
}

/// Cuts `text` at `cuts` (ascending byte offsets) into trimmed, non-empty spans, each paired with
/// the whitespace between it and the previous span.
pub(super) fn spans(text: &str, cuts: impl IntoIterator<Item = usize>) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    let mut prev_end: Option<usize> = None;
    for cut in cuts.into_iter().chain(std::iter::once(text.len())) {
        let segment = &text[from..cut];
        let trimmed = segment.trim();
        if !trimmed.is_empty() {
            let start = from + (segment.len() - segment.trim_start().len());
            out.push((prev_end.map_or("", |end| &text[end..start]), trimmed));
            prev_end = Some(start + trimmed.len());
        }
        from = cut;
    }
    out
}

/// Byte offsets where sentences end: after `.`, `!` or `?` followed by whitespace, after the
/// CJK `。！？` (CJK puts no space after them), closing quotes and brackets included, and at
/// every newline.
fn sentence_ends(text: &str) -> Vec<usize> {
    let mut cuts = Vec::new();
    for (i, c) in text.char_indices() {
        match c {
            '\n' => cuts.push(i),
            '。' | '！' | '？' => cuts.push(after_closers(text, i + c.len_utf8())),
            '.' | '!' | '?' => {
                let end = after_closers(text, i + 1);
                // Not a boundary inside "3.14", "e.g.x" or "...": only before whitespace or the end.
                if text[end..].chars().next().is_none_or(char::is_whitespace) {
                    cuts.push(end);
                }
            }
            _ => {}
        }
    }
    cuts
}

fn after_closers(text: &str, from: usize) -> usize {
    let rest = &text[from..];
    let closers = rest.trim_start_matches(['"', '\'', ')', ']', '”', '’', '」', '』', '）', '》']);
    from + (rest.len() - closers.len())
}

/// Pushes `text` as one piece if it fits in `max` tokens, else as its words, else as runs of
/// characters (CJK has no spaces between words).
pub(super) fn fit<'a>(sep: &'a str, text: &'a str, tokens: usize, max: usize, out: &mut Vec<Piece<'a>>) {
    if tokens <= max {
        out.push(Piece { sep, text, tokens });
        return;
    }
    let words = spans(
        text,
        text.char_indices().filter(|(_, c)| c.is_whitespace()).map(|(i, _)| i),
    );
    if words.len() < 2 {
        by_characters(sep, text, tokens, max, out);
        return;
    }
    for (k, (word_sep, word)) in words.into_iter().enumerate() {
        fit(if k == 0 { sep } else { word_sep }, word, count_tokens(word), max, out);
    }
}

/// Cuts a text without whitespace into runs of characters of about `max / 8` tokens, small
/// enough that packing still fills chunks and overlap can repeat a run.
fn by_characters<'a>(sep: &'a str, text: &'a str, tokens: usize, max: usize, out: &mut Vec<Piece<'a>>) {
    let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    // A single character is at most 4 tokens, under the 16-token minimum; this only stops recursion.
    if starts.len() < 2 {
        out.push(Piece { sep, text, tokens });
        return;
    }
    let parts = tokens.div_ceil((max / 8).max(1)).clamp(2, starts.len());
    let mut from = 0;
    for k in 1..=parts {
        let to = if k == parts {
            text.len()
        } else {
            starts[k * starts.len() / parts]
        };
        let run = &text[from..to];
        let run_sep = if from == 0 { sep } else { "" };
        let run_tokens = count_tokens(run);
        if run_tokens <= max {
            out.push(Piece {
                sep: run_sep,
                text: run,
                tokens: run_tokens,
            });
        } else {
            by_characters(run_sep, run, run_tokens, max, out);
        }
        from = to;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts<'a>(pieces: &[Piece<'a>]) -> Vec<&'a str> {
        pieces.iter().map(|p| p.text).collect()
    }

    #[test]
    fn paragraphs_split_on_blank_lines() {
        assert_eq!(paragraphs("a\nb\n\n  \n c \n\n"), vec!["a\nb", "c"]);
        assert!(paragraphs(" \n\n").is_empty());
    }

    #[test]
    fn sentences_split_on_western_cjk_and_newline_boundaries() {
        let pieces = sentences("Pi is 3.14. Really?! \"Yes.\" Next\nline 你好。世界！好吗？end", 512);
        assert_eq!(
            texts(&pieces),
            vec![
                "Pi is 3.14.",
                "Really?!",
                "\"Yes.\"",
                "Next",
                "line 你好。",
                "世界！",
                "好吗？",
                "end"
            ]
        );
        let seps: Vec<&str> = pieces.iter().map(|p| p.sep).collect();
        assert_eq!(seps, vec!["", " ", " ", " ", "\n", "", "", ""]);
        assert!(pieces.iter().all(|p| p.tokens == count_tokens(p.text)));
    }

    #[test]
    fn long_sentence_falls_back_to_words() {
        let text = "word ".repeat(40);
        let pieces = sentences(&text, 16);
        assert_eq!(pieces.len(), 40);
        assert!(pieces.iter().all(|p| p.text == "word" && p.tokens <= 16));
        assert_eq!(pieces[1].sep, " ");
    }

    #[test]
    fn spaceless_text_falls_back_to_characters() {
        let text = "知识库把文档切成小块以便检索".repeat(20);
        let pieces = sentences(&text, 16);
        assert!(pieces.len() > 1);
        assert!(pieces
            .iter()
            .all(|p| p.tokens <= 16 && p.tokens == count_tokens(p.text)));
        assert_eq!(pieces.iter().map(|p| p.text).collect::<String>(), text);
        assert!(pieces.iter().all(|p| p.sep.is_empty()));
    }

    #[test]
    fn lines_keep_indentation_and_fold_blank_lines_into_separators() {
        let pieces = lines("fn main() {\n    run();\n\n}\n", 512);
        assert_eq!(texts(&pieces), vec!["fn main() {", "    run();", "}"]);
        assert_eq!(pieces[2].sep, "\n\n");
    }
}
