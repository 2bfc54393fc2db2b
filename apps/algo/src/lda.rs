//! Latent Dirichlet allocation by collapsed Gibbs sampling: the kernel.
//!
//! The shared model is the word–topic count table `n_wk` (one row of `K` counts per word)
//! and the topic totals row `n_k = Σ_w n_wk`; each worker also keeps its documents' topic
//! assignments `z` and, per document, the topic counts `n_dk`. Resampling one token of
//! word `w` in document `d` removes it from the counts (written `¬`) and draws
//!
//! ```text
//! p(z = k | rest) ∝ (n_dk¬ + α) · (n_wk¬ + β) / (n_k¬ + Vβ)
//! ```
//!
//! The caller then applies `−1` to topic `old` and `+1` to the new topic in all three
//! count rows (additive deltas, as a parameter server `UPDATE` wants).
//!
//! Randomness is keyed, never shared: initial topics by `(seed, doc)` ([`init_doc`]) and the
//! sweep by `(seed, iteration, doc)` ([`doc_rng`]), with `doc` the document's index in the
//! whole corpus, so the draws do not depend on partitioning or thread scheduling.
//!
//! The objective is the collapsed log-likelihood `log p(w, z) = log p(w|z) + log p(z)`:
//!
//! ```text
//! log p(w|z) = K(lnΓ(Vβ) − V lnΓ(β)) + Σ_k [Σ_w lnΓ(n_kw + β) − lnΓ(n_k + Vβ)]
//! log p(z)   = D(lnΓ(Kα) − K lnΓ(α)) + Σ_d [Σ_k lnΓ(n_dk + α) − lnΓ(n_d + Kα)]
//! ```
//!
//! split into per-row terms ([`word_rows_term`], [`topic_totals_term`], [`doc_term`]) so a
//! worker can sum the rows it holds. This module does not know where rows live or how many
//! workers there are; [`reference()`] is the plain one-worker sampler used as the test oracle.

use super::Rng64;
use iterstore_data::Corpus;

mod sparse;

pub use sparse::SparseSampler;

/// Which sampler draws the topics (both draw from the same conditional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SamplerKind {
    /// [`TopicSampler`]: `K` terms per token.
    #[default]
    Dense,
    /// [`SparseSampler`]: terms for the document's and the word's topics only.
    Sparse,
}

impl SamplerKind {
    /// The name the CLI and the run report use.
    pub fn name(self) -> &'static str {
        match self {
            SamplerKind::Dense => "dense",
            SamplerKind::Sparse => "sparse",
        }
    }
}

/// Hyper-parameters of collapsed Gibbs LDA.
#[derive(Debug, Clone, PartialEq)]
pub struct LdaConfig {
    /// Number of topics `K`.
    pub topics: usize,
    /// Symmetric document–topic Dirichlet prior `α`.
    pub alpha: f64,
    /// Symmetric topic–word Dirichlet prior `β`.
    pub beta: f64,
    /// Seed of the initial assignments and of every sweep.
    pub seed: u64,
    /// Which sampler draws the topics.
    pub sampler: SamplerKind,
}

impl Default for LdaConfig {
    fn default() -> Self {
        Self {
            topics: 100,
            alpha: 0.1,
            beta: 0.01,
            seed: 42,
            sampler: SamplerKind::Dense,
        }
    }
}

impl LdaConfig {
    /// Checks that every parameter is usable, naming the first one that is not.
    pub fn validate(&self) -> Result<(), String> {
        if self.topics == 0 || self.topics > u32::MAX as usize {
            return Err(format!("lda: topics {} must be in 1..2^32", self.topics));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(format!("lda: alpha {} must be > 0", self.alpha));
        }
        if !(self.beta.is_finite() && self.beta > 0.0) {
            return Err(format!("lda: beta {} must be > 0", self.beta));
        }
        Ok(())
    }
}

/// Checks that every token's word id is below the corpus' vocabulary size.
pub fn check_corpus(corpus: &Corpus) -> Result<(), String> {
    for (d, doc) in corpus.docs.iter().enumerate() {
        if let Some(&w) = doc.iter().find(|&&w| w >= corpus.vocab_size) {
            return Err(format!(
                "lda: doc {d} has word {w} >= vocab size {}",
                corpus.vocab_size
            ));
        }
    }
    Ok(())
}

/// `ln Γ(x)` (via `libm`, a port of musl's `lgamma`).
#[inline]
pub fn lgamma(x: f64) -> f64 {
    libm::lgamma(x)
}

/// Fills `topics` (one entry per token of corpus document `doc`) with the initial topic
/// assignment: uniform on `0..K`, a function of `(cfg.seed, doc)` only.
pub fn init_doc(cfg: &LdaConfig, doc: u64, topics: &mut [u32]) {
    let mut rng = Rng64::from_key(&[cfg.seed, 0, doc]);
    for t in topics {
        *t = rng.below(cfg.topics as u32);
    }
}

/// The generator for sweep `iteration` (0-based) over corpus document `doc`; it yields one
/// draw per token, in token order.
pub fn doc_rng(cfg: &LdaConfig, iteration: u64, doc: u64) -> Rng64 {
    Rng64::from_key(&[cfg.seed, 1, iteration, doc])
}

/// Overwrites `doc_topic` (length `K`) with the topic counts of one document's assignments.
pub fn count_doc(topics: &[u32], doc_topic: &mut [i32]) {
    doc_topic.fill(0);
    for &t in topics {
        doc_topic[t as usize] += 1;
    }
}

/// Draws new topics for tokens; holds scratch buffers so sampling never allocates.
///
/// The sampler memoises `1/(n_k + Vβ)` per topic, keyed by the count it was computed from,
/// so a draw costs `K` multiplications instead of `K` divisions while still being a pure
/// function of its arguments (the same inputs give the same topic, whatever was sampled
/// before).
#[derive(Debug, Clone)]
pub struct TopicSampler {
    alpha: f64,
    beta: f64,
    vbeta: f64,
    cumulative: Vec<f64>,
    /// `inverse[k] = 1/(max(counted[k], 0) + Vβ)`.
    counted: Vec<i32>,
    inverse: Vec<f64>,
}

impl TopicSampler {
    /// A sampler for `cfg.topics` topics over a vocabulary of `vocab_size` words.
    pub fn new(cfg: &LdaConfig, vocab_size: u32) -> Self {
        Self {
            alpha: cfg.alpha,
            beta: cfg.beta,
            vbeta: f64::from(vocab_size) * cfg.beta,
            cumulative: vec![0.0; cfg.topics],
            counted: vec![i32::MIN; cfg.topics],
            inverse: vec![0.0; cfg.topics],
        }
    }

    /// Resamples one token whose current topic is `old` (or `old >= K` for a token not
    /// counted anywhere): excludes it from `word_topic` (its word's row `n_w·`),
    /// `topic_totals` (`n_·`) and `doc_topic` (`n_d·`), all of length `K` and read only,
    /// then draws `k` with probability ∝ `(n_dk¬+α)(n_wk¬+β)/(n_k¬+Vβ)` using exactly one
    /// draw of `rng`. Returns the new topic; the caller applies the `−1`/`+1` deltas.
    ///
    /// Each term is computed as `(n_dk¬+α)·(n_wk¬+β)·(1/(n_k¬+Vβ))` and summed in topic
    /// order; counts that a stale view makes negative are read as 0.
    #[inline]
    pub fn sample(
        &mut self,
        word_topic: &[i32],
        topic_totals: &[i32],
        doc_topic: &[i32],
        old: u32,
        rng: &mut Rng64,
    ) -> u32 {
        let k = self.cumulative.len();
        let (nw, nt, nd) = (&word_topic[..k], &topic_totals[..k], &doc_topic[..k]);
        let (alpha, beta, vbeta) = (self.alpha, self.beta, self.vbeta);
        let (counted, inverse) = (&mut self.counted[..k], &mut self.inverse[..k]);
        let old = old as usize;
        let inverse_old = match nt.get(old) {
            Some(&n) => 1.0 / (f64::from((n - 1).max(0)) + vbeta),
            None => 0.0,
        };
        let mut total = 0.0;
        for (j, c) in self.cumulative.iter_mut().enumerate() {
            if nt[j] != counted[j] {
                counted[j] = nt[j];
                inverse[j] = 1.0 / (f64::from(nt[j].max(0)) + vbeta);
            }
            let excluded = j == old;
            let ex = i32::from(excluded);
            let d = f64::from((nd[j] - ex).max(0)) + alpha;
            let w = f64::from((nw[j] - ex).max(0)) + beta;
            let t = if excluded { inverse_old } else { inverse[j] };
            total += d * w * t;
            *c = total;
        }
        let u = rng.next_f64() * total;
        self.cumulative.partition_point(|&c| c <= u).min(k - 1) as u32
    }
}

/// The sampler [`LdaConfig::sampler`] names: one interface for the sweeps of the app and
/// the limit.
#[derive(Debug, Clone)]
pub enum Sampler {
    /// The dense sampler.
    Dense(TopicSampler),
    /// The sparse sampler.
    Sparse(SparseSampler),
}

impl Sampler {
    /// The sampler `cfg.sampler` names, for a vocabulary of `vocab_size` words.
    pub fn new(cfg: &LdaConfig, vocab_size: u32) -> Self {
        match cfg.sampler {
            SamplerKind::Dense => Sampler::Dense(TopicSampler::new(cfg, vocab_size)),
            SamplerKind::Sparse => Sampler::Sparse(SparseSampler::new(cfg, vocab_size)),
        }
    }

    /// Starts a sweep: the topic totals as just read.
    #[inline]
    pub fn begin(&mut self, topic_totals: &[i32]) {
        if let Sampler::Sparse(s) = self {
            s.begin(topic_totals);
        }
    }

    /// Starts a document: its topic counts as just counted, and the totals now.
    #[inline]
    pub fn start_doc(&mut self, topic_totals: &[i32], doc_topic: &[i32]) {
        if let Sampler::Sparse(s) = self {
            s.start_doc(topic_totals, doc_topic);
        }
    }

    /// Resamples one token (see [`TopicSampler::sample`]); between draws the caller moves
    /// the token from `old` to the returned topic in the totals and document counts.
    #[inline]
    pub fn sample(
        &mut self,
        word_topic: &[i32],
        topic_totals: &[i32],
        doc_topic: &[i32],
        old: u32,
        rng: &mut Rng64,
    ) -> u32 {
        match self {
            Sampler::Dense(s) => s.sample(word_topic, topic_totals, doc_topic, old, rng),
            Sampler::Sparse(s) => s.sample(word_topic, topic_totals, doc_topic, old, rng),
        }
    }
}

/// `Σ lnΓ(n + β)` over every count `n` of the given word–topic rows (any number of rows,
/// flattened); the word rows' share of `log p(w|z)`.
pub fn word_rows_term(cfg: &LdaConfig, rows: &[i32]) -> f64 {
    let mut zeros = 0usize;
    let mut sum = 0.0;
    for &n in rows {
        if n <= 0 {
            zeros += 1;
        } else {
            sum += lgamma(f64::from(n) + cfg.beta);
        }
    }
    sum + zeros as f64 * lgamma(cfg.beta)
}

/// `K(lnΓ(Vβ) − V lnΓ(β)) − Σ_k lnΓ(n_k + Vβ)`: the rest of `log p(w|z)` besides
/// [`word_rows_term`].
pub fn topic_totals_term(cfg: &LdaConfig, vocab_size: u32, topic_totals: &[i32]) -> f64 {
    let v = f64::from(vocab_size);
    let vbeta = v * cfg.beta;
    let constant = topic_totals.len() as f64 * (lgamma(vbeta) - v * lgamma(cfg.beta));
    constant
        - topic_totals
            .iter()
            .map(|&n| lgamma(f64::from(n.max(0)) + vbeta))
            .sum::<f64>()
}

/// One document's share of `log p(z)`:
/// `lnΓ(Kα) − K lnΓ(α) + Σ_k lnΓ(n_dk + α) − lnΓ(n_d + Kα)`.
pub fn doc_term(cfg: &LdaConfig, doc_topic: &[i32]) -> f64 {
    let k = doc_topic.len() as f64;
    let len: i64 = doc_topic.iter().map(|&n| i64::from(n)).sum();
    let counts: f64 = doc_topic
        .iter()
        .map(|&n| lgamma(f64::from(n) + cfg.alpha))
        .sum();
    lgamma(k * cfg.alpha) - k * lgamma(cfg.alpha) + counts - lgamma(len as f64 + k * cfg.alpha)
}

/// A complete LDA state: the shared counts and every token's topic.
#[derive(Debug, Clone, PartialEq)]
pub struct LdaModel {
    /// Number of topics `K`.
    pub topics: usize,
    /// Vocabulary size `V`.
    pub vocab_size: u32,
    /// Word–topic counts, row-major `V × K`.
    pub word_topic: Vec<i32>,
    /// Topic totals, length `K`.
    pub topic_totals: Vec<i32>,
    /// Topic of every token, per document.
    pub assignments: Vec<Vec<u32>>,
}

impl LdaModel {
    /// `log p(w, z)` of this state.
    pub fn log_likelihood(&self, cfg: &LdaConfig) -> f64 {
        let mut doc_topic = vec![0; self.topics];
        let mut docs = 0.0;
        for z in &self.assignments {
            count_doc(z, &mut doc_topic);
            docs += doc_term(cfg, &doc_topic);
        }
        word_rows_term(cfg, &self.word_topic)
            + topic_totals_term(cfg, self.vocab_size, &self.topic_totals)
            + docs
    }
}

/// Plain sequential collapsed Gibbs sampling, one worker: initialise with [`init_doc`], then
/// `iters` sweeps over the documents and tokens in order, each move applied immediately.
/// Returns the final state and the log-likelihood after each sweep.
///
/// # Panics
/// If `cfg` or `corpus` is invalid.
pub fn reference(corpus: &Corpus, cfg: &LdaConfig, iters: usize) -> (LdaModel, Vec<f64>) {
    cfg.validate().unwrap();
    check_corpus(corpus).unwrap();
    let k = cfg.topics;
    let mut m = LdaModel {
        topics: k,
        vocab_size: corpus.vocab_size,
        word_topic: vec![0; corpus.vocab_size as usize * k],
        topic_totals: vec![0; k],
        assignments: Vec::with_capacity(corpus.docs.len()),
    };
    for (d, doc) in corpus.docs.iter().enumerate() {
        let mut z = vec![0; doc.len()];
        init_doc(cfg, d as u64, &mut z);
        for (&w, &t) in doc.iter().zip(&z) {
            m.word_topic[w as usize * k + t as usize] += 1;
            m.topic_totals[t as usize] += 1;
        }
        m.assignments.push(z);
    }
    let mut sampler = TopicSampler::new(cfg, corpus.vocab_size);
    let mut doc_topic = vec![0; k];
    let mut history = Vec::with_capacity(iters);
    for it in 0..iters {
        for (d, doc) in corpus.docs.iter().enumerate() {
            let z = &mut m.assignments[d];
            count_doc(z, &mut doc_topic);
            let mut rng = doc_rng(cfg, it as u64, d as u64);
            for (&w, t) in doc.iter().zip(z.iter_mut()) {
                let row = w as usize * k;
                let (old, wt) = (*t as usize, &mut m.word_topic[row..row + k]);
                let new = sampler.sample(wt, &m.topic_totals, &doc_topic, *t, &mut rng) as usize;
                wt[old] -= 1;
                wt[new] += 1;
                m.topic_totals[old] -= 1;
                m.topic_totals[new] += 1;
                doc_topic[old] -= 1;
                doc_topic[new] += 1;
                *t = new as u32;
            }
        }
        history.push(m.log_likelihood(cfg));
    }
    (m, history)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lgamma_matches_known_values() {
        let ln_fact = |n: u32| (1..=n).map(|i| f64::from(i).ln()).sum::<f64>();
        let cases = [
            (0.5, 0.5 * std::f64::consts::PI.ln()),
            (1.0, 0.0),
            (2.0, 0.0),
            (1.5, -0.120_782_237_635_245_22),
            (0.01, 4.599_479_878_042_022),
            (0.001, 6.907_178_885_383_854),
            (10.0, ln_fact(9)),
            (100.0, 359.134_205_369_575_4),
            (1e6, 12_815_504.569_147_612),
        ];
        for (x, want) in cases {
            let got = lgamma(x);
            assert!(
                (got - want).abs() <= 1e-12 * want.abs().max(1.0),
                "lgamma({x}) = {got}, want {want}"
            );
        }
        for n in 1..171u32 {
            let want = ln_fact(n - 1);
            assert!(
                (lgamma(f64::from(n)) - want).abs() <= 1e-12 * want.max(1.0),
                "n = {n}"
            );
        }
    }

    fn sampler_frequencies(old: u32) -> (Vec<f64>, Vec<f64>) {
        let cfg = LdaConfig {
            topics: 4,
            alpha: 0.5,
            beta: 0.1,
            seed: 1,
            ..LdaConfig::default()
        };
        let (nw, nt, nd) = ([3, 0, 1, 6], [10, 4, 8, 20], [2, 1, 0, 5]);
        let mut sampler = TopicSampler::new(&cfg, 10);
        let mut want: Vec<f64> = (0..4)
            .map(|j| {
                let ex = i32::from(j == old as usize);
                (f64::from(nd[j] - ex) + 0.5) * (f64::from(nw[j] - ex) + 0.1)
                    / (f64::from(nt[j] - ex) + 1.0)
            })
            .collect();
        let total: f64 = want.iter().sum();
        want.iter_mut().for_each(|p| *p /= total);
        let mut rng = Rng64::from_key(&[9]);
        let mut got = vec![0.0; 4];
        let n = 200_000;
        for _ in 0..n {
            got[sampler.sample(&nw, &nt, &nd, old, &mut rng) as usize] += 1.0 / f64::from(n);
        }
        (got, want)
    }

    #[test]
    fn sampler_draws_from_the_collapsed_conditional() {
        for old in [0, 3, u32::MAX] {
            let (got, want) = sampler_frequencies(old);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() < 0.005,
                    "old {old}: got {got:?}, want {want:?}"
                );
            }
        }
    }

    #[test]
    fn log_likelihood_of_a_single_token() {
        // One token, K = 1, V = 1: p(w|z) = p(z) = 1, so log p(w, z) = 0.
        let cfg = LdaConfig {
            topics: 1,
            alpha: 0.3,
            beta: 0.7,
            seed: 0,
            ..LdaConfig::default()
        };
        let m = LdaModel {
            topics: 1,
            vocab_size: 1,
            word_topic: vec![1],
            topic_totals: vec![1],
            assignments: vec![vec![0]],
        };
        assert!(m.log_likelihood(&cfg).abs() < 1e-12);
    }

    #[test]
    fn validate_and_check_reject_bad_input() {
        assert!(LdaConfig::default().validate().is_ok());
        assert!(LdaConfig {
            beta: 0.0,
            ..LdaConfig::default()
        }
        .validate()
        .unwrap_err()
        .contains("beta"));
        let corpus = Corpus {
            docs: vec![vec![0, 3]],
            vocab_size: 3,
        };
        assert!(check_corpus(&corpus).unwrap_err().contains("word 3"));
    }
}
