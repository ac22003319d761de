//! Combining the vector and full-text rankings into one, with scores in 0-1. Used for
//! knowledge-base chunks and for long-term memories alike: a hit is any row id with a score.

use std::collections::HashMap;

/// The fusion of new knowledge bases and memory configs: a weighted sum of min-max
/// normalised scores that leans on the vector side. Calibrated on the public dev set
/// (docs/benchmarks.md): with a multilingual e5 model, full text is much the weaker ranker,
/// and equal-weight RRF (the old default) lost 0.08 nDCG@10 to vectors alone, while this
/// keeps the vector ranking and lets full text break near-ties.
pub const DEFAULT_STRATEGY: &str = "WEIGHTED_SUM";
pub const DEFAULT_DENSE_WEIGHT: f64 = 0.9;

/// The vector and full-text rankings fused by `strategy` (`WEIGHTED_SUM` or `RRF`).
pub fn fuse(strategy: &str, dense: &[Hit], sparse: &[Hit], rrf_k: f64, dense_weight: f64) -> Vec<Hit> {
    match strategy {
        "WEIGHTED_SUM" => weighted(dense, sparse, dense_weight),
        _ => rrf(&[dense, sparse], rrf_k),
    }
}

/// Keeps the hits that reach `threshold`, a similarity. Fused scores are rescaled per query (an
/// unrelated query's best hit still scores 1, and the weakest candidate 0), so without a
/// reranker each hit is held to its own vector similarity (`dense`, the raw scores; a hit only
/// full text found has none, and goes); reranked hits carry the reranker's score.
pub fn keep_similar(fused: &mut Vec<Hit>, dense: &[Hit], reranked: bool, threshold: f64) {
    if reranked {
        fused.retain(|h| h.score >= threshold);
        return;
    }
    let similarity: HashMap<i64, f64> = dense.iter().map(|h| (h.id, h.score)).collect();
    fused.retain(|h| similarity.get(&h.id).is_some_and(|s| *s >= threshold));
}

/// A hit of one retriever: row id (chunk, memory) and its raw score, best first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub id: i64,
    pub score: f64,
}

/// Reciprocal rank fusion: each list adds 1 / (k + rank). Scores are divided by the best
/// possible sum (first in every list), so 1.0 means "top of both".
pub fn rrf(lists: &[&[Hit]], k: f64) -> Vec<Hit> {
    let mut sums: HashMap<i64, f64> = HashMap::new();
    for list in lists {
        for (rank, hit) in list.iter().enumerate() {
            *sums.entry(hit.id).or_default() += 1.0 / (k + rank as f64 + 1.0);
        }
    }
    let best = lists.iter().filter(|l| !l.is_empty()).count() as f64 / (k + 1.0);
    sorted(sums.into_iter().map(|(id, s)| Hit {
        id,
        score: if best > 0.0 { s / best } else { 0.0 },
    }))
}

/// Weighted sum of min-max normalised scores: `dense_weight` for vectors, the rest for text.
/// The weights are shared among the lists that found something, as RRF's best sum is: with
/// full text finding nothing, the best chunk scored `dense_weight` (0.9), and a threshold above
/// it returned nothing, not even an exact match.
/// Lists that found something but were given no weight share it equally: with `dense_weight`
/// 0 and full text finding nothing, every chunk scored 0 and came in id order.
pub fn weighted(dense: &[Hit], sparse: &[Hit], dense_weight: f64) -> Vec<Hit> {
    let mut lists = [(dense, dense_weight), (sparse, 1.0 - dense_weight)];
    let mut answered: f64 = lists.iter().filter(|(l, _)| !l.is_empty()).map(|(_, w)| w).sum();
    if answered <= 0.0 {
        lists.iter_mut().for_each(|(_, w)| *w = 1.0);
        answered = lists.iter().filter(|(l, _)| !l.is_empty()).count() as f64;
    }
    let mut sums: HashMap<i64, f64> = HashMap::new();
    for (list, weight) in lists {
        let weight = if answered > 0.0 { weight / answered } else { 0.0 };
        let (min, max) = list
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), h| (lo.min(h.score), hi.max(h.score)));
        for hit in list {
            let norm = if max > min {
                (hit.score - min) / (max - min)
            } else {
                1.0
            };
            *sums.entry(hit.id).or_default() += weight * norm;
        }
    }
    sorted(sums.into_iter().map(|(id, score)| Hit {
        id,
        score: score.clamp(0.0, 1.0),
    }))
}

fn sorted(hits: impl Iterator<Item = Hit>) -> Vec<Hit> {
    let mut v: Vec<Hit> = hits.collect();
    // Ties broken by id so results are stable.
    v.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(ids: &[i64]) -> Vec<Hit> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| Hit {
                id: *id,
                score: 1.0 - i as f64 * 0.1,
            })
            .collect()
    }

    #[test]
    fn rrf_rewards_agreement_and_normalises() {
        let fused = rrf(&[&hits(&[1, 2, 3]), &hits(&[2, 1, 4])], 60.0);
        assert_eq!(fused.iter().map(|h| h.id).collect::<Vec<_>>()[..2], [1, 2]);
        assert!(fused.iter().all(|h| (0.0..=1.0).contains(&h.score)));
        let top = rrf(&[&hits(&[7]), &hits(&[7])], 60.0);
        assert!((top[0].score - 1.0).abs() < 1e-12);
        assert!(rrf(&[&[], &[]], 60.0).is_empty());
        // Only one retriever answered: its first hit still scores 1.
        assert!((rrf(&[&hits(&[3]), &[]], 60.0)[0].score - 1.0).abs() < 1e-12);
    }

    #[test]
    fn weighted_mixes_normalised_scores() {
        let fused = weighted(&hits(&[1, 2]), &hits(&[2, 3]), 0.7);
        assert_eq!(fused[0].id, 1);
        assert!((fused[0].score - 0.7).abs() < 1e-9);
        assert!(fused.iter().all(|h| (0.0..=1.0).contains(&h.score)));
        // Only one retriever answered: its first hit still scores 1.
        for (dense, sparse) in [(hits(&[4, 5]), vec![]), (vec![], hits(&[6]))] {
            let alone = weighted(&dense, &sparse, 0.9);
            assert!((alone[0].score - 1.0).abs() < 1e-12, "{alone:?}");
        }
        assert!(weighted(&[], &[], 0.9).is_empty());
        // The one list that answered had no weight: it ranks all the same.
        let vectors_only = weighted(&hits(&[9, 4, 5]), &[], 0.0);
        assert_eq!(vectors_only.iter().map(|h| h.id).collect::<Vec<_>>(), [9, 4, 5]);
        assert!((vectors_only[0].score - 1.0).abs() < 1e-12);
    }
}
