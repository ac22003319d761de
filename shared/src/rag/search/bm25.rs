//! Okapi BM25, one scorer for knowledge-base chunks and memories; the callers bring the
//! statistics from where they keep them (a base's word counts, a memory scope counted on the
//! fly). The IDF is Robertson-Spärck Jones's with the +1 inside the logarithm that keeps it
//! positive, as Lucene and the BEIR baselines use it.

use std::collections::HashMap;

use super::fusion::Hit;

/// Term-frequency saturation.
pub const K1: f64 = 0.9;
/// Length normalisation. K1 and B are Anserini's BEIR baseline settings.
pub const B: f64 = 0.4;

/// The weight of a word found in `df` of `docs` documents.
pub fn idf(docs: f64, df: f64) -> f64 {
    (1.0 + (docs - df + 0.5) / (df + 0.5)).ln()
}

/// A document to score: its length in words and how often it holds each query word.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Candidate {
    pub id: i64,
    pub len: i64,
    pub words: Vec<String>,
    pub counts: Vec<i32>,
}

/// The candidates by BM25 score, best first (ties by id), at most `limit`. `weights` holds the
/// IDF of each query word; words not in it count nothing.
pub fn rank(weights: &HashMap<String, f64>, avg_len: f64, candidates: &[Candidate], limit: usize) -> Vec<Hit> {
    let avg_len = if avg_len > 0.0 { avg_len } else { 1.0 };
    let mut hits: Vec<Hit> = candidates
        .iter()
        .map(|c| {
            let norm = K1 * (1.0 - B + B * c.len as f64 / avg_len);
            let score = c
                .words
                .iter()
                .zip(&c.counts)
                .filter_map(|(w, &tf)| weights.get(w).map(|idf| (idf, f64::from(tf))))
                .map(|(idf, tf)| idf * tf * (K1 + 1.0) / (tf + norm))
                .sum();
            Hit { id: c.id, score }
        })
        .filter(|h| h.score > 0.0)
        .collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    hits.truncate(limit);
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: i64, len: i64, words: &[(&str, i32)]) -> Candidate {
        Candidate {
            id,
            len,
            words: words.iter().map(|(w, _)| (*w).to_owned()).collect(),
            counts: words.iter().map(|(_, c)| *c).collect(),
        }
    }

    #[test]
    fn rare_words_frequent_matches_and_short_documents_win() {
        let weights: HashMap<String, f64> = [
            ("dog".to_owned(), idf(1000.0, 5.0)),
            ("the".to_owned(), idf(1000.0, 900.0)),
        ]
        .into();
        assert!(weights["dog"] > 5.0 * weights["the"]);
        let hits = rank(
            &weights,
            20.0,
            &[
                doc(1, 20, &[("the", 3)]),
                doc(2, 20, &[("dog", 1)]),
                doc(3, 20, &[("dog", 3)]),
                doc(4, 80, &[("dog", 3)]),
                doc(5, 20, &[("cat", 9)]),
            ],
            10,
        );
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), [3, 4, 2, 1]);
        // Saturation: three times the matches is far from three times the score.
        assert!(hits[0].score < 2.0 * hits[2].score);
        assert_eq!(rank(&weights, 20.0, &[doc(9, 10, &[("dog", 1)])], 0), vec![]);
    }

    #[test]
    fn textbook_value() {
        // One word, idf ln(1 + (10 - 1 + 0.5) / 1.5), tf 2, length equal to the average.
        let w: HashMap<String, f64> = [("x".to_owned(), idf(10.0, 1.0))].into();
        let got = rank(&w, 5.0, &[doc(1, 5, &[("x", 2)])], 1)[0].score;
        let expected = (1.0f64 + 9.5 / 1.5).ln() * 2.0 * 1.9 / (2.0 + 0.9);
        assert!((got - expected).abs() < 1e-12, "{got} {expected}");
    }
}
