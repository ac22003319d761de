//! Word segmentation for full-text search. Postgres's `simple` parser keeps a run of Han
//! characters as one token, so a two-character Chinese word inside a sentence would never
//! match: CJK text is cut into words here (jieba, search mode) before it is indexed or
//! queried. Other scripts are split on non-alphanumeric characters.

use std::sync::OnceLock;

use jieba_rs::Jieba;

fn jieba() -> &'static Jieba {
    static JIEBA: OnceLock<Jieba> = OnceLock::new();
    JIEBA.get_or_init(Jieba::new)
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xF900..=0xFAFF    // Compatibility Ideographs
        | 0xAC00..=0xD7AF    // Hangul
        | 0x20000..=0x2FA1F)
}

/// Lower-cased search tokens of `text`, in order (repeats kept).
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = None;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (pos, c) = chars[i];
        if is_cjk(c) {
            if let Some(s) = start.take() {
                out.push(text[s..pos].to_lowercase());
            }
            let run_start = pos;
            let mut j = i;
            while j < chars.len() && is_cjk(chars[j].1) {
                j += 1;
            }
            let run_end = chars.get(j).map(|(p, _)| *p).unwrap_or(text.len());
            out.extend(
                jieba()
                    .cut_for_search(&text[run_start..run_end], true)
                    .into_iter()
                    .map(|t| t.word.to_owned()),
            );
            i = j;
            continue;
        }
        if c.is_alphanumeric() {
            start.get_or_insert(pos);
        } else if let Some(s) = start.take() {
            out.push(text[s..pos].to_lowercase());
        }
        i += 1;
    }
    if let Some(s) = start {
        out.push(text[s..].to_lowercase());
    }
    out.retain(|t| !t.trim().is_empty());
    out
}

/// The text to build a `tsvector` from: tokens separated by spaces.
pub fn for_index(text: &str) -> String {
    tokens(text).join(" ")
}

/// `word` as a quoted `to_tsquery` operand (quotes and backslashes doubled, as its syntax
/// wants), so no word can change the query's syntax.
pub fn tsquery_operand(word: &str) -> String {
    format!("'{}'", word.replace('\\', "\\\\").replace('\'', "''"))
}

/// A `to_tsquery('simple', ...)` expression matching any distinct token.
pub fn or_query(text: &str) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    let terms: Vec<String> = tokens(text)
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .map(|t| tsquery_operand(&t))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_latin_and_cjk() {
        assert_eq!(tokens("Hello, World-42!"), vec!["hello", "world", "42"]);
        let zh = tokens("我们使用向量数据库进行检索");
        assert!(
            zh.contains(&"向量".to_owned()) && zh.contains(&"检索".to_owned()),
            "{zh:?}"
        );
        let mixed = tokens("pgvector支持HNSW索引");
        assert!(
            mixed.contains(&"pgvector".to_owned()) && mixed.contains(&"索引".to_owned()),
            "{mixed:?}"
        );
        assert_eq!(or_query("a a b").as_deref(), Some("'a' | 'b'"));
        assert_eq!(or_query("!!!"), None);
        assert_eq!(or_query("a B a").as_deref(), Some("'a' | 'b'"));
        assert_eq!(tsquery_operand("o'k\\"), "'o''k\\\\'");
    }
}
