//! Token counting with the cl100k_base tokenizer, the one the embedding models are sized in.

use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

/// Number of cl100k_base tokens in `text`, special-token markers counted as plain text.
pub fn count_tokens(text: &str) -> usize {
    if text.is_empty() {
        return 0;
    }
    tokenizer().count_ordinary(text)
}

/// The longest prefix of `text`, cut at a character, of at most `max` tokens: what fits an
/// embedding model sized to the base's chunks.
pub fn prefix_within(text: &str, max: usize) -> &str {
    if count_tokens(text) <= max {
        return text;
    }
    let cuts: Vec<usize> = text.char_indices().map(|(at, _)| at).collect();
    // The prefix up to cuts[fits] is within `max`; the one up to cuts[over] (or the whole) is not.
    let (mut fits, mut over) = (0, cuts.len());
    while over - fits > 1 {
        let mid = (fits + over) / 2;
        match count_tokens(&text[..cuts[mid]]) <= max {
            true => fits = mid,
            false => over = mid,
        }
    }
    &text[..cuts[fits]]
}

fn tokenizer() -> &'static CoreBPE {
    static BPE: OnceLock<CoreBPE> = OnceLock::new();
    // The BPE ranks are compiled into the binary, so building can only fail on a corrupt build,
    // which every chunker test would catch; parsing them once keeps each count cheap.
    BPE.get_or_init(|| tiktoken_rs::cl100k_base().expect("the bundled cl100k_base ranks are valid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_known_strings() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("hello world"), 2);
        assert_eq!(count_tokens("<|endoftext|>"), 7);
        assert!(count_tokens("知识库的文档") >= 3);
    }

    #[test]
    fn a_prefix_within_a_count_is_cut_at_a_character() {
        assert_eq!(prefix_within("hello world", 2), "hello world");
        assert_eq!(prefix_within("hello world", 1), "hello");
        assert_eq!(prefix_within("hello world", 0), "");
        let long = "知识库的文档在这里被切成块。".repeat(200);
        let cut = prefix_within(&long, 100);
        assert!(
            count_tokens(cut) <= 100 && count_tokens(cut) >= 95,
            "{}",
            count_tokens(cut)
        );
        assert!(long.starts_with(cut));
    }
}
