//! A synthetic text corpus with the word statistics of real text, for benchmarks: words drawn
//! from a 5,000-word vocabulary by a Zipf distribution (rank r has weight 1/r), the most
//! frequent ranks being English function words, from a seeded generator so every run writes
//! the same texts. Queries mix words of every frequency: ranks drawn log-uniformly, so a
//! query is as likely to hold a stop word as a mid-frequency or a rare word.

/// Distinct words in the vocabulary.
pub const VOCABULARY: usize = 5_000;

/// The most frequent words of English, in rank order: they take the top ranks.
const FUNCTION_WORDS: &[&str] = &[
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "with", "on", "be", "by", "this", "are",
    "or", "from", "at", "an", "not", "can", "which", "you", "when", "if", "has", "was", "will",
];

const ONSETS: &[&str] = &[
    "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "cl", "dr", "gr", "pl", "st",
    "tr", "sh", "ch",
];
const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ai", "ou", "ea"];
const CODAS: &[&str] = &["", "", "n", "r", "s", "t", "l", "x", "nd", "st"];

/// splitmix64: small, fast and deterministic; statistical quality is ample for word choice.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `range`.
    pub fn between(&mut self, range: std::ops::RangeInclusive<usize>) -> usize {
        range.start() + (self.next_u64() % (range.end() - range.start() + 1) as u64) as usize
    }
}

pub struct Corpus {
    /// Words by rank, most frequent first.
    pub words: Vec<String>,
    /// Cumulative Zipf weights by rank, ending at 1.0.
    cdf: Vec<f64>,
    rng: Rng,
}

impl Corpus {
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut words: Vec<String> = FUNCTION_WORDS.iter().map(|w| (*w).to_owned()).collect();
        let mut seen: std::collections::HashSet<String> = words.iter().cloned().collect();
        while words.len() < VOCABULARY {
            let syllables = rng.between(1..=3);
            let word: String = (0..syllables)
                .map(|_| {
                    let pick = |rng: &mut Rng, set: &[&str]| set[rng.between(0..=set.len() - 1)].to_owned();
                    pick(&mut rng, ONSETS) + &pick(&mut rng, VOWELS) + &pick(&mut rng, CODAS)
                })
                .collect();
            if seen.insert(word.clone()) {
                words.push(word);
            }
        }
        let total: f64 = (1..=VOCABULARY).map(|r| 1.0 / r as f64).sum();
        let mut acc = 0.0;
        let cdf = (1..=VOCABULARY)
            .map(|r| {
                acc += 1.0 / r as f64 / total;
                acc
            })
            .collect();
        Self { words, cdf, rng }
    }

    /// A text of `len` words drawn by frequency.
    pub fn text(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len * 7);
        for i in 0..len {
            let u = self.rng.unit();
            let rank = self.cdf.partition_point(|&c| c < u).min(VOCABULARY - 1);
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&self.words[rank]);
        }
        out
    }

    /// A query of `len` words whose ranks are drawn log-uniformly.
    pub fn query(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| {
                let rank = (VOCABULARY as f64).powf(self.rng.unit()) as usize - 1;
                self.words[rank.min(VOCABULARY - 1)].as_str()
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
}
