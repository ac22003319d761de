//! Which words of a query the built-in full-text search looks up, decided from the base's word
//! statistics (`rag_terms`: how many chunks hold each word, kept exact by triggers on
//! `chunks`).
//!
//! A word's GIN list costs time in proportion to its length, and a long list carries little
//! evidence: a word in most chunks barely tells them apart. So only short lists are read; a
//! query made of long-listed words only reads the shortest of them. Words in more than half of
//! a large base are that base's stop words: their lists are never read, so alone they find
//! nothing, and in the BM25 score of the chunks other words found they weigh next to nothing.

use std::collections::HashMap;

use sqlx::PgPool;

use crate::rag::search::bm25;
use crate::rag::segment::tsquery_operand;

/// Longest index list read for a word when the query has rarer ones. At about 0.2 µs an entry,
/// a list this long costs about a millisecond.
pub const LIST_MAX: i64 = 5_000;

/// How many of the base's chunks hold each word of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct WordStats {
    /// Chunks of the base with a text entry.
    pub chunks: i64,
    /// Their words, repeats included (BM25's average length is `tokens / chunks`).
    pub tokens: i64,
    /// Each distinct word of the query and the chunks holding it.
    pub words: Vec<(String, i64)>,
}

/// The distinct `words` of a query (as `segment` cuts them) with their counts in base `rag_id`.
pub async fn lookup(db: &PgPool, rag_id: i64, words: &[String]) -> sqlx::Result<WordStats> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT t.term, coalesce(s.chunks, 0)::int8, coalesce(s.tokens, 0)
         FROM unnest(array_append($2::text[], '')) AS t(term)
         LEFT JOIN rag_terms s ON s.rag_id = $1 AND s.term = t.term",
    )
    .bind(rag_id)
    .bind(words)
    .fetch_all(db)
    .await?;
    let mut stats = WordStats {
        chunks: 0,
        tokens: 0,
        words: Vec::with_capacity(rows.len()),
    };
    for (term, count, tokens) in rows {
        match term.is_empty() {
            true => (stats.chunks, stats.tokens) = (count, tokens),
            false => stats.words.push((term, count)),
        }
    }
    Ok(stats)
}

/// A word looked up in the index, with its weight (inverse document frequency).
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub operand: String,
    pub weight: f64,
}

/// What the full-text statement reads and ranks by.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Words whose index lists give candidates, rarest first.
    pub listed: Vec<Listed>,
    /// All words a chunk must hold to be a candidate, `a & b`, with their summed weight;
    /// `None` when a single word is searched or when every list is long (the conjunction
    /// would walk them all).
    pub every: Option<(String, f64)>,
    /// Every word of the query found in the base, with its BM25 weight: candidates are
    /// scored by all of them, stop words included (they weigh little).
    pub ranked: HashMap<String, f64>,
    /// The base's average chunk length in words.
    pub avg_len: f64,
}

/// The plan for `stats`, or `None` when no word can find anything.
pub fn plan(stats: &WordStats) -> Option<Plan> {
    let n = stats.chunks.max(1) as f64;
    let weight = |count: i64| bm25::idf(n, count as f64);
    let ranked: HashMap<String, f64> = stats
        .words
        .iter()
        .filter(|(_, count)| *count > 0)
        .map(|(w, count)| (w.clone(), weight(*count)))
        .collect();
    let mut words: Vec<(String, i64)> = stats
        .words
        .iter()
        .filter(|(_, count)| *count > 0 && !(*count > LIST_MAX && *count as f64 > n / 2.0))
        .cloned()
        .collect();
    words.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let rarest = words.first()?.1;
    let operands: Vec<String> = words.iter().map(|(w, _)| tsquery_operand(w)).collect();
    let listed: Vec<Listed> = words
        .iter()
        .zip(&operands)
        .filter(|((_, count), _)| *count <= LIST_MAX || *count == rarest)
        .map(|((_, count), operand)| Listed {
            operand: operand.clone(),
            weight: weight(*count),
        })
        .collect();
    let every = (words.len() > 1 && rarest <= LIST_MAX).then(|| {
        let total = words.iter().map(|(_, count)| weight(*count)).sum();
        (operands.join(" & "), total)
    });
    Some(Plan {
        listed,
        every,
        ranked,
        avg_len: stats.tokens as f64 / n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(chunks: i64, words: &[(&str, i64)]) -> WordStats {
        WordStats {
            chunks,
            tokens: chunks * 10,
            words: words.iter().map(|(w, c)| ((*w).to_owned(), *c)).collect(),
        }
    }

    fn listed(p: &Plan) -> Vec<&str> {
        p.listed.iter().map(|l| l.operand.as_str()).collect()
    }

    #[test]
    fn rare_words_are_listed_and_joined_with_the_common_ones() {
        let p = plan(&stats(
            100_000,
            &[("the", 99_000), ("gait", 42_000), ("pond", 400), ("drunt", 4_000)],
        ))
        .unwrap();
        assert_eq!(listed(&p), ["'pond'", "'drunt'"]);
        assert_eq!(p.ranked.len(), 4, "stop words are scored too");
        assert!(p.ranked["the"] < p.ranked["gait"] && p.ranked["gait"] < p.ranked["pond"]);
        assert!((p.avg_len - 10.0).abs() < 1e-9);
        let (every, weight) = p.every.unwrap();
        assert_eq!(every, "'pond' & 'drunt' & 'gait'");
        let expected: f64 = [400.0_f64, 4_000.0, 42_000.0]
            .iter()
            .map(|c| bm25::idf(100_000.0, *c))
            .sum();
        assert!((weight - expected).abs() < 1e-9);
        assert!(p.listed[0].weight > p.listed[1].weight);
    }

    #[test]
    fn only_long_lists_read_the_shortest_and_no_conjunction() {
        let p = plan(&stats(100_000, &[("you", 57_000), ("gait", 42_000), ("drea", 31_000)])).unwrap();
        assert_eq!(listed(&p), ["'drea'"]);
        assert_eq!(p.every, None);
        assert_eq!(p.ranked.len(), 3);
    }

    #[test]
    fn stop_words_of_a_large_base_find_nothing() {
        assert_eq!(plan(&stats(100_000, &[("the", 100_000), ("of", 97_000)])), None);
    }

    #[test]
    fn a_small_base_has_no_stop_words() {
        let p = plan(&stats(3, &[("refund", 3), ("policy", 2)])).unwrap();
        assert_eq!(listed(&p), ["'policy'", "'refund'"]);
        assert_eq!(p.every.unwrap().0, "'policy' & 'refund'");
    }

    #[test]
    fn unknown_words_are_dropped() {
        assert_eq!(plan(&stats(10, &[("zzz", 0)])), None);
        assert_eq!(plan(&stats(0, &[])), None);
        let p = plan(&stats(10, &[("zzz", 0), ("a", 2)])).unwrap();
        assert_eq!(listed(&p), ["'a'"]);
        assert_eq!(p.every, None);
    }
}
