//! Text analysis for full-text search, one and the same for what is indexed (chunks, memories)
//! and for queries:
//! - Unicode NFKC, so full-width letters, ligatures and presentation forms meet their plain form;
//! - a word is a run of letters, digits and combining marks: a mark (Arabic harakat, Devanagari
//!   and Thai vowel signs) stays inside its word instead of cutting it in pieces;
//! - lower case; Arabic words lose harakat and tatweel, and alef variants, alef maksura and teh
//!   marbuta fold to the letter they are written for (as Lucene's Arabic normaliser does), so a
//!   vocalised query meets unvocalised text;
//! - CJK runs are cut into words by jieba (search mode): Postgres's parser keeps a run of Han
//!   characters as one token, so a two-character word inside a sentence would never match.
//!
//! No stemming: the bases are multilingual and a stemmer is per language; measured on the
//! English dev set, BM25 over these words already matches the textbook BM25 (docs/benchmarks.md).
//!
//! The `tsvector` is written here too ([`tsvector`]) rather than by `to_tsvector`, whose parser
//! decides what a word is from the server's locale.

use std::collections::HashMap;
use std::sync::OnceLock;

use jieba_rs::Jieba;
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;

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

/// Longest word kept, in bytes: longer runs are encoded data, not words anyone searches for,
/// and Postgres refuses lexemes over 2 KiB.
const MAX_WORD_BYTES: usize = 256;

/// A word as it is indexed: lower case, Arabic folded.
fn fold(word: &str) -> String {
    word.chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            // Harakat (fathatan .. sukun, maddah, hamza marks), superscript alef, tatweel.
            '\u{064B}'..='\u{065F}' | '\u{0670}' | '\u{0640}' => None,
            'أ' | 'إ' | 'آ' | 'ٱ' => Some('ا'),
            'ى' => Some('ي'),
            'ة' => Some('ه'),
            c => Some(c),
        })
        .collect()
}

struct Words {
    out: Vec<String>,
    word: String,
    cjk: String,
}

impl Words {
    fn end_word(&mut self) {
        if self.word.chars().any(char::is_alphanumeric) {
            let w = fold(&self.word);
            if !w.is_empty() && w.len() <= MAX_WORD_BYTES {
                self.out.push(w);
            }
        }
        self.word.clear();
    }

    fn end_cjk(&mut self) {
        if !self.cjk.is_empty() {
            self.out.extend(
                jieba()
                    .cut_for_search(&self.cjk, true)
                    .into_iter()
                    .map(|t| t.word.trim().to_owned())
                    // jieba gives a run of characters it has no word or model for (CJK
                    // Extension A, kana) back whole, however long.
                    .filter(|w| !w.is_empty() && w.len() <= MAX_WORD_BYTES),
            );
            self.cjk.clear();
        }
    }
}

/// The search words of `text`, in order (repeats kept).
pub fn tokens(text: &str) -> Vec<String> {
    let mut w = Words {
        out: Vec::new(),
        word: String::new(),
        cjk: String::new(),
    };
    for c in text.nfkc() {
        if is_cjk(c) {
            w.end_word();
            w.cjk.push(c);
            continue;
        }
        w.end_cjk();
        if c.is_alphanumeric() || is_combining_mark(c) {
            w.word.push(c);
        } else {
            w.end_word();
        }
    }
    w.end_word();
    w.end_cjk();
    w.out
}

/// The text to hand a search engine that analyses text itself: words separated by spaces.
pub fn for_index(text: &str) -> String {
    tokens(text).join(" ")
}

/// `word` quoted as a lexeme of a `tsquery` or `tsvector` literal (quotes and backslashes
/// doubled, as their syntax wants), so no word can change the literal's syntax.
pub fn tsquery_operand(word: &str) -> String {
    format!("'{}'", word.replace('\\', "\\\\").replace('\'', "''"))
}

/// Postgres keeps word positions up to this one (larger ones are stored as it).
const MAX_POSITION: usize = 16_383;
/// Postgres keeps at most this many positions of one word.
const MAX_POSITIONS: usize = 256;
/// Postgres refuses a `tsvector` whose words take 1 MiB or more; words past this are left out.
const MAX_LEXEME_BYTES: usize = 1_000_000;

/// `text` as a `tsvector` literal (`'word':1,4 'other':2`), for `$1::tsvector`: each word with
/// its positions, so a word's count in the text (its BM25 term frequency) is the number of its
/// positions.
pub fn tsvector(text: &str) -> String {
    let mut positions: HashMap<String, Vec<usize>> = HashMap::new();
    let mut bytes = 0;
    for (i, word) in tokens(text).into_iter().enumerate() {
        let pos = (i + 1).min(MAX_POSITION);
        if let Some(p) = positions.get_mut(&word) {
            if p.len() < MAX_POSITIONS && p.last() != Some(&pos) {
                p.push(pos);
            }
        } else if bytes + word.len() < MAX_LEXEME_BYTES {
            bytes += word.len();
            positions.insert(word, vec![pos]);
        }
    }
    let mut words: Vec<(String, Vec<usize>)> = positions.into_iter().collect();
    words.sort_by_key(|(_, p)| p[0]);
    words
        .iter()
        .map(|(word, p)| {
            let p: Vec<String> = p.iter().map(usize::to_string).collect();
            format!("{}:{}", tsquery_operand(word), p.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The distinct words of `text`, in order of first appearance.
pub fn distinct(text: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    tokens(text).into_iter().filter(|t| seen.insert(t.clone())).collect()
}

/// A `tsquery` literal (for `$1::tsquery`) matching any of `words` (as [`distinct`] gives them).
pub fn or_query(words: &[String]) -> Option<String> {
    let terms: Vec<String> = words.iter().map(|t| tsquery_operand(t)).collect();
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
        assert_eq!(or_query(&distinct("a a b")).as_deref(), Some("'a' | 'b'"));
        assert_eq!(or_query(&distinct("!!!")), None);
        assert_eq!(or_query(&distinct("a B a")).as_deref(), Some("'a' | 'b'"));
        assert_eq!(tsquery_operand("o'k\\"), "'o''k\\\\'");
    }

    #[test]
    fn combining_marks_stay_inside_words() {
        // Devanagari: "हिन्दी" has a virama and vowel signs (marks) between its letters.
        assert_eq!(tokens("हिन्दी भाषा"), vec!["हिन्दी", "भाषा"]);
        // Thai vowel signs above and below letters.
        assert_eq!(tokens("ภาษาไทย ดี"), vec!["ภาษาไทย", "ดี"]);
        // Decomposed Latin accents are composed by NFKC, not split.
        assert_eq!(tokens("cafe\u{0301} crème"), vec!["café", "crème"]);
    }

    #[test]
    fn arabic_is_folded() {
        // Vocalised and plain spellings of "the book" meet; alef with hamza, teh marbuta and
        // alef maksura fold; tatweel goes.
        assert_eq!(tokens("الْكِتَابُ"), tokens("الكتاب"));
        assert_eq!(tokens("أحمد إلى مدرسة"), vec!["احمد", "الي", "مدرسه"]);
        assert_eq!(tokens("كتـــاب"), vec!["كتاب"]);
        // Presentation forms (as pasted from some PDFs) meet the letters.
        assert_eq!(tokens("\u{FEE1}\u{FEE0}\u{FE8E}"), tokens("\u{0645}\u{0644}\u{0627}"));
    }

    #[test]
    fn nfkc_and_case() {
        assert_eq!(tokens("ＡＢＣ ﬁle"), vec!["abc", "file"]);
        assert_eq!(tokens("STRASSE Straße"), vec!["strasse", "straße"]);
    }

    #[test]
    fn tsvector_literal_counts_positions() {
        assert_eq!(tsvector("the cat saw the dog"), "'the':1,4 'cat':2 'saw':3 'dog':5");
        assert_eq!(tsvector("o'k"), "'o':1 'k':2");
        assert_eq!(tsvector("!!!"), "");
        let long = "x".repeat(MAX_WORD_BYTES + 1);
        assert_eq!(tsvector(&format!("{long} y")), "'y':1");
        // Postgres refuses a lexeme of 2 KiB: 700 characters jieba cannot cut were one word.
        let uncut = "\u{3400}".repeat(700);
        assert_eq!(tsvector(&format!("{uncut} y")), "'y':1");
        let many = "w ".repeat(MAX_POSITIONS + 10);
        assert_eq!(tsvector(&many).matches(',').count(), MAX_POSITIONS - 1);
    }
}
