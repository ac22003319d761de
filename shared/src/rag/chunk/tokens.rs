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
}
