//! A BEIR-format retrieval set (`corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv`) and the
//! trec_eval measures the retrieval-quality evaluation reports.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct Passage {
    #[serde(rename = "_id")]
    pub id: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub text: String,
}

impl Passage {
    /// What is indexed: the convention of the set's reference numbers.
    pub fn content(&self) -> String {
        format!("{} {}", self.title, self.text).trim().to_owned()
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Query {
    #[serde(rename = "_id")]
    pub id: String,
    pub text: String,
}

/// Graded judgements of one query: passage id -> gain.
pub type Judgements = HashMap<String, i64>;

#[derive(Debug, Clone)]
pub struct Dataset {
    pub passages: Vec<Passage>,
    pub queries: Vec<Query>,
    pub qrels: HashMap<String, Judgements>,
}

fn jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{}:{}", path.display(), i + 1)))
        .collect()
}

impl Dataset {
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let passages: Vec<Passage> = jsonl(&dir.join("corpus.jsonl"))?;
        let queries: Vec<Query> = jsonl(&dir.join("queries.jsonl"))?;
        let path = dir.join("qrels").join("test.tsv");
        let text = std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        let mut qrels: HashMap<String, Judgements> = HashMap::new();
        // The first line is the header `query-id corpus-id score`.
        for (i, line) in text.lines().enumerate().skip(1) {
            if line.trim().is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let [query, passage, score] = fields[..] else {
                bail!("{}:{}: expected 3 tab-separated fields", path.display(), i + 1);
            };
            let score: i64 = score
                .trim()
                .parse()
                .with_context(|| format!("{}:{}: score", path.display(), i + 1))?;
            qrels
                .entry(query.to_owned())
                .or_default()
                .insert(passage.to_owned(), score);
        }
        let mut seen = HashSet::new();
        if let Some(p) = passages.iter().find(|p| !seen.insert(p.id.as_str())) {
            bail!("corpus.jsonl: passage id {} appears twice", p.id);
        }
        Ok(Self {
            passages,
            queries,
            qrels,
        })
    }

    /// Keeps `limit` passages: relevant ones first, then other judged ones, then the rest, each
    /// in file order, so a small smoke run still has answers to find. Judgements of the
    /// passages cut out are dropped with them; judgements of passages the corpus never had
    /// stay, as trec_eval counts them.
    pub fn truncate(&mut self, limit: usize) {
        if limit >= self.passages.len() {
            return;
        }
        let best_gain = |id: &str| self.qrels.values().filter_map(|j| j.get(id).copied()).max();
        let tier = |id: &str| match best_gain(id) {
            Some(g) if g > 0 => 0,
            Some(_) => 1,
            None => 2,
        };
        let mut order: Vec<(u8, usize)> = self
            .passages
            .iter()
            .enumerate()
            .map(|(i, p)| (tier(&p.id), i))
            .collect();
        order.sort_unstable();
        let mut keep: Vec<usize> = order.into_iter().take(limit).map(|(_, i)| i).collect();
        keep.sort_unstable();
        let kept: HashSet<usize> = keep.iter().copied().collect();
        let cut: HashSet<String> = self
            .passages
            .iter()
            .enumerate()
            .filter(|(i, _)| !kept.contains(i))
            .map(|(_, p)| p.id.clone())
            .collect();
        self.passages = keep.into_iter().map(|i| self.passages[i].clone()).collect();
        for judgements in self.qrels.values_mut() {
            judgements.retain(|id, _| !cut.contains(id));
        }
    }

    /// The queries that count: those with a relevant (gain above 0) passage in the corpus.
    pub fn judged_queries(&self) -> Vec<(&Query, &Judgements)> {
        let ids: HashSet<&str> = self.passages.iter().map(|p| p.id.as_str()).collect();
        self.queries
            .iter()
            .filter_map(|q| self.qrels.get(&q.id).map(|j| (q, j)))
            .filter(|(_, j)| j.iter().any(|(id, g)| *g > 0 && ids.contains(id.as_str())))
            .collect()
    }
}

/// nDCG@k as trec_eval's `ndcg_cut`: linear gain, DCG = sum of gain / log2(rank + 1), the ideal
/// DCG from all of the query's judgements with a gain above 0.
pub fn ndcg_at(ranked: &[&str], judged: &Judgements, k: usize) -> f64 {
    let dcg = |gains: &mut dyn Iterator<Item = i64>| -> f64 {
        gains
            .take(k)
            .enumerate()
            .map(|(i, g)| g.max(0) as f64 / (i as f64 + 2.0).log2())
            .sum()
    };
    let got = dcg(&mut ranked.iter().map(|id| judged.get(*id).copied().unwrap_or(0)));
    let mut ideal: Vec<i64> = judged.values().copied().filter(|g| *g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let best = dcg(&mut ideal.into_iter());
    if best > 0.0 {
        got / best
    } else {
        0.0
    }
}

/// Relevant (gain above 0) passages in the first `k` over all relevant judged ones.
pub fn recall_at(ranked: &[&str], judged: &Judgements, k: usize) -> f64 {
    let relevant = judged.values().filter(|g| **g > 0).count();
    if relevant == 0 {
        return 0.0;
    }
    let found = ranked
        .iter()
        .take(k)
        .filter(|id| judged.get(**id).is_some_and(|g| *g > 0))
        .count();
    found as f64 / relevant as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(pairs: &[(&str, i64)]) -> Judgements {
        pairs.iter().map(|(id, g)| ((*id).to_owned(), *g)).collect()
    }

    #[test]
    fn ndcg_uses_linear_gain_and_the_ideal_of_all_relevant_judgements() {
        let j = judged(&[("a", 2), ("b", 1), ("c", 0), ("d", 1)]);
        assert!((ndcg_at(&["a", "b", "d"], &j, 10) - 1.0).abs() < 1e-12);
        // b (1) at rank 1, a (2) at rank 3; ideal 2, 1, 1.
        let got = 1.0 + 2.0 / 4f64.log2();
        let ideal = 2.0 + 1.0 / 3f64.log2() + 1.0 / 4f64.log2();
        assert!((ndcg_at(&["b", "c", "a"], &j, 10) - got / ideal).abs() < 1e-12);
        // Beyond the cut nothing counts, unjudged passages gain nothing.
        assert_eq!(ndcg_at(&["x", "y", "a"], &j, 2), 0.0);
        assert_eq!(ndcg_at(&["a"], &judged(&[("a", 0)]), 10), 0.0);
    }

    #[test]
    fn recall_counts_relevant_passages_in_the_first_k() {
        let j = judged(&[("a", 2), ("b", 1), ("c", 0), ("d", 1)]);
        assert!((recall_at(&["c", "a", "x", "b"], &j, 3) - 1.0 / 3.0).abs() < 1e-12);
        assert!((recall_at(&["c", "a", "x", "b"], &j, 100) - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn truncation_keeps_relevant_then_judged_passages_and_drops_their_cut_judgements() {
        let passage = |id: &str| Passage {
            id: id.into(),
            title: String::new(),
            text: id.into(),
        };
        let mut set = Dataset {
            passages: ["p0", "p1", "p2", "p3", "p4"].map(passage).to_vec(),
            queries: vec![Query {
                id: "q".into(),
                text: "q".into(),
            }],
            qrels: HashMap::from([("q".to_owned(), judged(&[("p3", 1), ("p1", 0), ("p4", 0), ("gone", 2)]))]),
        };
        set.truncate(2);
        let ids: Vec<&str> = set.passages.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["p1", "p3"]);
        assert_eq!(set.qrels["q"], judged(&[("p3", 1), ("p1", 0), ("gone", 2)]));
        assert_eq!(set.judged_queries().len(), 1);
    }
}
