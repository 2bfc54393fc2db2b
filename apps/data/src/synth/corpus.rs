//! Synthetic bag-of-words corpora from the LDA generative process with planted topics
//! (LDA input), returned together with the planted topics so recovery can be checked.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma, Poisson};

use super::sampling::{zipf_weights, AliasTable};
use super::size_index;
use crate::Corpus;

/// Zipf exponent of each topic's word distribution over its own words.
const TOPIC_ZIPF_EXPONENT: f64 = 1.0;
/// Dirichlet concentration used when the given one is not positive and finite.
const DEFAULT_ALPHA: f64 = 0.1;

/// Parameters of [`zipf_corpus`].
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusSpec {
    /// Number of documents.
    pub num_docs: u32,
    /// Vocabulary size.
    pub vocab_size: u32,
    /// Number of planted topics.
    pub num_topics: u32,
    /// Mean document length in tokens (lengths are Poisson).
    pub doc_len: u32,
    /// Symmetric Dirichlet concentration of each document's topic mixture.
    pub alpha: f64,
    /// Random seed.
    pub seed: u64,
}

impl CorpusSpec {
    /// The preset for `size` (one of [`super::SIZES`]), with `alpha = 0.1` and seed 0:
    ///
    /// | size   | docs    | vocab  | topics | mean length | ≈ tokens |
    /// |--------|---------|--------|--------|-------------|----------|
    /// | tiny   | 100     | 500    | 5      | 50          | 5 K      |
    /// | small  | 1 000   | 2 000  | 10     | 100         | 100 K    |
    /// | medium | 5 000   | 10 000 | 20     | 150         | 750 K    |
    /// | large  | 20 000  | 30 000 | 50     | 200         | 4 M      |
    /// | xlarge | 100 000 | 50 000 | 100    | 200         | 20 M     |
    pub fn preset(size: &str) -> Result<CorpusSpec, String> {
        let (num_docs, vocab_size, num_topics, doc_len) = match size_index(size)? {
            0 => (100, 500, 5, 50),
            1 => (1_000, 2_000, 10, 100),
            2 => (5_000, 10_000, 20, 150),
            3 => (20_000, 30_000, 50, 200),
            _ => (100_000, 50_000, 100, 200),
        };
        Ok(CorpusSpec {
            num_docs,
            vocab_size,
            num_topics,
            doc_len,
            alpha: DEFAULT_ALPHA,
            seed: 0,
        })
    }

    /// Checks that the spec describes a non-empty, well-defined corpus.
    pub fn validate(&self) -> Result<(), String> {
        if self.num_docs == 0 || self.doc_len == 0 {
            return Err("num_docs and doc_len must be positive".into());
        }
        if self.num_topics == 0 || self.num_topics > self.vocab_size {
            return Err(format!(
                "num_topics must be in 1..={} (vocab_size)",
                self.vocab_size
            ));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(format!("alpha {} must be finite and > 0", self.alpha));
        }
        Ok(())
    }

    /// Generates the corpus; see [`zipf_corpus`].
    pub fn generate(&self) -> (Corpus, PlantedTopics) {
        zipf_corpus(
            self.num_docs,
            self.vocab_size,
            self.num_topics,
            self.doc_len,
            self.alpha,
            self.seed,
        )
    }
}

/// The planted topics of a [`zipf_corpus`]: every word belongs to exactly one topic.
#[derive(Debug, Clone, PartialEq)]
pub struct PlantedTopics {
    /// `word_topic[w]` is the topic that owns word `w`.
    pub word_topic: Vec<u32>,
    /// `topic_words[k]` lists topic `k`'s words, most probable first.
    pub topic_words: Vec<Vec<u32>>,
}

impl PlantedTopics {
    /// Number of topics.
    pub fn num_topics(&self) -> usize {
        self.topic_words.len()
    }
}

/// A corpus from the LDA generative process with planted, separable topics.
///
/// The vocabulary is randomly permuted and cut into `num_topics` disjoint blocks of
/// near-equal size; topic `k` draws only words of block `k`, with Zipf probabilities
/// (exponent 1) in a random order within the block. Each document draws a topic mixture
/// from a symmetric Dirichlet(`alpha`), a Poisson(`doc_len`) length, then each token's
/// topic from the mixture and its word from that topic.
///
/// Degenerate parameters are coerced rather than rejected: `num_topics` is clamped to
/// `1..=vocab_size`, a non-positive or non-finite `alpha` becomes 0.1, and an empty
/// vocabulary gives empty documents. See [`CorpusSpec::validate`].
pub fn zipf_corpus(
    num_docs: u32,
    vocab_size: u32,
    num_topics: u32,
    doc_len: u32,
    alpha: f64,
    seed: u64,
) -> (Corpus, PlantedTopics) {
    let mut rng = StdRng::seed_from_u64(seed);
    let num_topics = num_topics.clamp(1, vocab_size.max(1)) as usize;
    let alpha = if alpha.is_finite() && alpha > 0.0 {
        alpha
    } else {
        DEFAULT_ALPHA
    };
    let planted = plant_topics(&mut rng, vocab_size, num_topics);
    let topic_tables: Vec<AliasTable> = planted
        .topic_words
        .iter()
        .map(|words| AliasTable::new(&zipf_weights(words.len(), TOPIC_ZIPF_EXPONENT)))
        .collect();

    let gamma = Gamma::new(alpha, 1.0).ok();
    let lengths = Poisson::new(f64::from(doc_len)).ok();
    let mut mixture = vec![0.0f64; num_topics];
    let mut docs = Vec::with_capacity(num_docs as usize);
    for _ in 0..num_docs {
        let len = match &lengths {
            Some(p) => p.sample(&mut rng) as usize,
            None => 0,
        };
        draw_mixture(&mut rng, gamma.as_ref(), &mut mixture);
        let mut doc = Vec::with_capacity(len);
        if vocab_size > 0 {
            for _ in 0..len {
                let topic = sample_cumulative(&mixture, rng.gen::<f64>());
                let words = &planted.topic_words[topic];
                doc.push(words[topic_tables[topic].sample(&mut rng)]);
            }
        }
        docs.push(doc);
    }
    (Corpus { docs, vocab_size }, planted)
}

/// Shuffles the vocabulary into `num_topics` disjoint blocks, each in random rank order.
fn plant_topics(rng: &mut StdRng, vocab_size: u32, num_topics: usize) -> PlantedTopics {
    let mut words: Vec<u32> = (0..vocab_size).collect();
    words.shuffle(rng);
    let mut word_topic = vec![0u32; vocab_size as usize];
    let mut topic_words = Vec::with_capacity(num_topics);
    let (base, extra) = (words.len() / num_topics, words.len() % num_topics);
    let mut start = 0;
    for k in 0..num_topics {
        let end = start + base + usize::from(k < extra);
        let block = words[start..end].to_vec();
        for &w in &block {
            word_topic[w as usize] = k as u32;
        }
        topic_words.push(block);
        start = end;
    }
    PlantedTopics {
        word_topic,
        topic_words,
    }
}

/// Fills `out` with the cumulative sums of a Dirichlet draw (last entry 1). If every gamma
/// draw underflows to zero, which tiny `alpha` makes possible, one topic gets all mass.
fn draw_mixture(rng: &mut StdRng, gamma: Option<&Gamma<f64>>, out: &mut [f64]) {
    let mut total = 0.0;
    for slot in out.iter_mut() {
        let g = gamma.map_or(1.0, |g| g.sample(rng));
        total += g;
        *slot = total;
    }
    if total > 0.0 && total.is_finite() {
        for slot in out.iter_mut() {
            *slot /= total;
        }
    } else {
        let pick = rng.gen_range(0..out.len());
        for (k, slot) in out.iter_mut().enumerate() {
            *slot = if k >= pick { 1.0 } else { 0.0 };
        }
    }
}

/// The first index whose cumulative probability exceeds `u`.
fn sample_cumulative(cumulative: &[f64], u: f64) -> usize {
    cumulative
        .partition_point(|&c| c <= u)
        .min(cumulative.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_for_a_seed() {
        let spec = CorpusSpec::preset("tiny").unwrap();
        assert_eq!(spec.generate(), spec.generate());
        let other = CorpusSpec {
            seed: 5,
            ..spec.clone()
        };
        assert_ne!(spec.generate().0, other.generate().0);
    }

    #[test]
    fn planted_topics_partition_the_vocabulary() {
        let (corpus, planted) = CorpusSpec::preset("tiny").unwrap().generate();
        assert_eq!(corpus.vocab_size, 500);
        assert_eq!(planted.num_topics(), 5);
        let mut all: Vec<u32> = planted.topic_words.concat();
        all.sort_unstable();
        assert_eq!(all, (0..500).collect::<Vec<_>>());
        for (k, words) in planted.topic_words.iter().enumerate() {
            assert_eq!(words.len(), 100);
            assert!(words
                .iter()
                .all(|&w| planted.word_topic[w as usize] == k as u32));
        }
    }

    #[test]
    fn documents_are_topic_concentrated_and_zipf_shaped() {
        let spec = CorpusSpec::preset("small").unwrap();
        let (corpus, planted) = spec.generate();
        assert_eq!(corpus.docs.len(), 1_000);
        let tokens: usize = corpus.docs.iter().map(Vec::len).sum();
        assert!(
            (tokens as f64 / 100_000.0 - 1.0).abs() < 0.05,
            "{tokens} tokens"
        );

        // With alpha = 0.1 most of a document's tokens come from its main topic.
        let mut dominant = 0.0;
        for doc in corpus.docs.iter().filter(|d| !d.is_empty()) {
            let mut per_topic = vec![0usize; planted.num_topics()];
            for &w in doc {
                per_topic[planted.word_topic[w as usize] as usize] += 1;
            }
            dominant += *per_topic.iter().max().unwrap() as f64 / doc.len() as f64;
        }
        dominant /= corpus.docs.len() as f64;
        assert!(dominant > 0.6, "mean dominant-topic share {dominant}");

        // Within a topic the top word is far more frequent than a mid-ranked one.
        let mut counts = vec![0usize; corpus.vocab_size as usize];
        for &w in corpus.docs.iter().flatten() {
            counts[w as usize] += 1;
        }
        let words = &planted.topic_words[0];
        let (top, mid) = (
            counts[words[0] as usize],
            counts[words[words.len() / 2] as usize],
        );
        assert!(top > 20 * mid.max(1), "top {top}, mid {mid}");
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        let (c, p) = zipf_corpus(3, 0, 4, 5, -1.0, 0);
        assert_eq!(c.docs.len(), 3);
        assert!(c.docs.iter().all(Vec::is_empty));
        assert_eq!(p.num_topics(), 1);
        let (c, p) = zipf_corpus(2, 3, 10, 0, 1e-300, 0);
        assert_eq!(p.num_topics(), 3);
        assert!(c.docs.iter().all(Vec::is_empty));
        let (c, _) = zipf_corpus(50, 10, 2, 20, 1e-6, 1);
        assert!(c.docs.iter().flatten().all(|&w| w < 10));
    }
}
