//! SparseLDA's bucket sampler (Yao, Mimno and McCallum, KDD'09): the same collapsed
//! conditional as [`TopicSampler`](super::TopicSampler), split so that only the word's
//! bucket costs work per topic.
//!
//! The conditional splits into three buckets,
//!
//! ```text
//! (n_dk + α)(n_wk + β)/(n_k + Vβ) =   αβ/(n_k + Vβ)              s: every topic
//!                                   + n_dk β/(n_k + Vβ)          r: topics of the document
//!                                   + (n_dk + α) n_wk/(n_k + Vβ) q: topics of the word
//! ```
//!
//! `s` and `r` are kept up to date as counts change (two topics per token), and each
//! topic's coefficient `(n_dk + α)/(n_k + Vβ)` is cached, so neither costs more than O(1)
//! per token, and `r`'s draw walks the document's topics only. The word's row arrives
//! from the store dense (one READ of its `K` counts per token, the access pattern the
//! dense sampler has), so `q` is computed over all `K` topics, but as one multiplication
//! per topic with no branch and no division, in single precision (the loop vectorizes,
//! four topics an instruction; `s`, `r` and the running sums over blocks stay double),
//! summed per block of 8 topics as a tree of independent additions ([`prefix8`]); a draw
//! in `q` counts the blocks' running sums below it, then the topics' within one block (no
//! chain of subtractions, no mispredicted exit). `s`'s draw walks all topics, in
//! the rare case a draw falls there (`αβ` is small). Counts that a stale view makes
//! negative are read as 0, as the dense sampler does. On NYT with 2 workers it ran an
//! iteration in 0.6x the dense sampler's time at 100 topics and 0.45x at 1000
//! (BENCHMARKS.md); a sparse row format would make `q` proportional to the word's topics.
//!
//! The caller owns the counts, as with the dense sampler: after each draw it moves the
//! token from `old` to the returned topic in `topic_totals` and `doc_topic`, and the
//! sampler re-reads just those two topics at the next draw. [`SparseSampler::begin`]
//! (when the totals are read) and [`SparseSampler::start_doc`] (when a document's counts
//! are) re-read everything, which also bounds the rounding the running sums collect.

use super::super::Rng64;
use super::LdaConfig;

/// Marks a topic absent from the document's non-zero list.
const ABSENT: u32 = u32::MAX;

/// The sparse sampler (see the module docs).
#[derive(Debug, Clone)]
pub struct SparseSampler {
    alpha: f64,
    beta: f64,
    vbeta: f64,
    /// `1/(n_k + Vβ)` per topic.
    inverse: Vec<f64>,
    /// `n_k` (clamped at 0) per topic, as `inverse` was computed from.
    total: Vec<i32>,
    /// `(n_dk + α)/(n_k + Vβ)` per topic, computed in double and kept in single
    /// precision, what `q`'s terms are computed from.
    coefficient: Vec<f32>,
    /// `n_dk` (clamped at 0) per topic, as the caches were computed from.
    doc: Vec<i32>,
    /// `Σ_k αβ/(n_k + Vβ)`.
    s: f64,
    /// `Σ_k n_dk β/(n_k + Vβ)`.
    r: f64,
    /// The document's topics with `n_dk > 0`, and each topic's position in it.
    doc_topics: Vec<u32>,
    position: Vec<u32>,
    /// Topics whose counts the caller changed since the caches were computed.
    stale: [u32; 2],
    /// Scratch, `K` entries: each topic's `q` term for the token (single precision: twice
    /// the terms per vector instruction).
    word_topics: Vec<f32>,
    /// Scratch: the `q` mass of the topics up to the end of each block of 8.
    block_mass: Vec<f64>,
}

impl SparseSampler {
    /// A sampler for `cfg.topics` topics over a vocabulary of `vocab_size` words.
    pub fn new(cfg: &LdaConfig, vocab_size: u32) -> Self {
        let k = cfg.topics;
        Self {
            alpha: cfg.alpha,
            beta: cfg.beta,
            vbeta: f64::from(vocab_size) * cfg.beta,
            inverse: vec![0.0; k],
            total: vec![0; k],
            coefficient: vec![0.0; k],
            doc: vec![0; k],
            s: 0.0,
            r: 0.0,
            doc_topics: Vec::with_capacity(k),
            position: vec![ABSENT; k],
            stale: [ABSENT; 2],
            word_topics: vec![0.0; k],
            block_mass: vec![0.0; k.div_ceil(8)],
        }
    }

    /// Starts a sweep from the topic totals `n_·` (length `K`), with no document.
    pub fn begin(&mut self, topic_totals: &[i32]) {
        let k = self.inverse.len();
        self.doc.fill(0);
        self.doc_topics.clear();
        self.position.fill(ABSENT);
        self.stale = [ABSENT; 2];
        self.s = 0.0;
        self.r = 0.0;
        for (t, &n) in topic_totals[..k].iter().enumerate() {
            let inverse = 1.0 / (f64::from(n.max(0)) + self.vbeta);
            self.total[t] = n.max(0);
            self.inverse[t] = inverse;
            self.coefficient[t] = (self.alpha * inverse) as f32;
            self.s += self.alpha * self.beta * inverse;
        }
    }

    /// Starts a document whose topic counts are `doc_topic`, with the totals as they are
    /// now (both length `K`).
    pub fn start_doc(&mut self, topic_totals: &[i32], doc_topic: &[i32]) {
        self.refresh(topic_totals, None);
        for &t in &self.doc_topics {
            self.position[t as usize] = ABSENT;
        }
        self.doc_topics.clear();
        self.r = 0.0;
        for (t, &n) in doc_topic[..self.inverse.len()].iter().enumerate() {
            let n = n.max(0);
            self.doc[t] = n;
            self.coefficient[t] = ((f64::from(n) + self.alpha) * self.inverse[t]) as f32;
            if n > 0 {
                self.position[t] = self.doc_topics.len() as u32;
                self.doc_topics.push(t as u32);
                self.r += f64::from(n) * self.beta * self.inverse[t];
            }
        }
    }

    /// Resamples one token whose current topic is `old` (or `old >= K` for a token not
    /// counted anywhere), exactly as [`TopicSampler::sample`](super::TopicSampler::sample)
    /// describes — the token excluded from the three count rows, one draw of `rng` — and
    /// returns the new topic. The draw picks the same distribution as the dense sampler's,
    /// not the same topic.
    pub fn sample(
        &mut self,
        word_topic: &[i32],
        topic_totals: &[i32],
        doc_topic: &[i32],
        old: u32,
        rng: &mut Rng64,
    ) -> u32 {
        let k = self.inverse.len();
        self.refresh(topic_totals, Some(doc_topic));
        let counted = (old as usize) < k;
        if counted {
            // Exclude the token: the caches hold the counts without it until the caller's
            // change is re-read at the next draw.
            let o = old as usize;
            self.set(o, topic_totals[o] - 1, doc_topic[o] - 1);
            self.stale[0] = old;
        }
        // q's term of every topic (0 for the word's absent topics), computed without
        // branches so the loop vectorizes; then per block of 8 topics the q mass up to and including it (each block summed
        // as `block_sum` does), so that a draw finds its block and then its topic by
        // counting the running sums at most `u`: no walk of dependent subtractions, no
        // branch to mispredict.
        let mass = &mut self.word_topics[..k];
        let terms = (&word_topic[..k], &self.coefficient[..k]);
        let q = q_mass(mass, terms, old as usize, &mut self.block_mass);
        let (s, r) = (self.s.max(0.0), self.r.max(0.0));
        let u = rng.next_f64() * (q + r + s);
        let new = if u < q {
            draw_in_q(mass, &self.block_mass, u)
        } else if u < q + r && !self.doc_topics.is_empty() {
            let mut left = u - q;
            let mut pick = *self.doc_topics.last().expect("not empty");
            for &t in &self.doc_topics {
                left -= f64::from(self.doc[t as usize]) * self.beta * self.inverse[t as usize];
                if left < 0.0 {
                    pick = t;
                    break;
                }
            }
            pick
        } else {
            let mut left = u - q - r;
            let ab = self.alpha * self.beta;
            let mut pick = k as u32 - 1;
            for (t, &inverse) in self.inverse.iter().enumerate() {
                left -= ab * inverse;
                if left < 0.0 {
                    pick = t as u32;
                    break;
                }
            }
            pick
        };
        self.stale[1] = new;
        new
    }

    /// Re-reads the topics the caller changed since the last draw (their totals, and their
    /// document counts when `doc_topic` is given).
    fn refresh(&mut self, topic_totals: &[i32], doc_topic: Option<&[i32]>) {
        for i in 0..2 {
            let t = std::mem::replace(&mut self.stale[i], ABSENT) as usize;
            if t < self.inverse.len() {
                let doc = doc_topic.map_or(self.doc[t], |d| d[t]);
                self.set(t, topic_totals[t], doc);
            }
        }
    }

    /// Sets topic `t`'s total and document count in the caches and running sums.
    fn set(&mut self, t: usize, total: i32, doc: i32) {
        let (total, doc) = (total.max(0), doc.max(0));
        // Unchanged counts change nothing (a topic re-read after being excluded, or read
        // twice): skip them, and the division when only the document's count moved.
        let same_total = total == self.total[t];
        if same_total && doc == self.doc[t] {
            return;
        }
        let inverse = if same_total {
            self.inverse[t]
        } else {
            1.0 / (f64::from(total) + self.vbeta)
        };
        self.total[t] = total;
        let was = (self.inverse[t], self.doc[t]);
        self.s += self.alpha * self.beta * (inverse - was.0);
        self.r += self.beta * (f64::from(doc) * inverse - f64::from(was.1) * was.0);
        self.inverse[t] = inverse;
        self.doc[t] = doc;
        self.coefficient[t] = ((f64::from(doc) + self.alpha) * inverse) as f32;
        match (doc > 0, self.position[t]) {
            (true, ABSENT) => {
                self.position[t] = self.doc_topics.len() as u32;
                self.doc_topics.push(t as u32);
            }
            (false, at) if at != ABSENT => {
                self.doc_topics.swap_remove(at as usize);
                if let Some(&moved) = self.doc_topics.get(at as usize) {
                    self.position[moved as usize] = at;
                }
                self.position[t] = ABSENT;
            }
            _ => {}
        }
    }

    /// The unnormalised mass of each topic for the token, from the caches as
    /// [`sample`](Self::sample) uses them, and the total the draw scales to: the running
    /// sums `s` and `r` plus `q` (for tests).
    #[cfg(test)]
    pub(crate) fn masses(
        &mut self,
        word_topic: &[i32],
        topic_totals: &[i32],
        doc_topic: &[i32],
        old: u32,
    ) -> (Vec<f64>, f64) {
        let k = self.inverse.len();
        self.refresh(topic_totals, Some(doc_topic));
        let o = old as usize;
        if o < k {
            self.set(o, topic_totals[o] - 1, doc_topic[o] - 1);
        }
        let mut q = 0.0;
        let masses: Vec<f64> = (0..k)
            .map(|t| {
                let n = (word_topic[t] - i32::from(t == o)).max(0);
                let (inverse, doc) = (self.inverse[t], f64::from(self.doc[t]));
                // q's term in single precision, as `sample` computes it.
                let term = f64::from(self.coefficient[t] * n as f32);
                q += term;
                self.alpha * self.beta * inverse + doc * self.beta * inverse + term
            })
            .collect();
        let total = self.s + self.r + q;
        if o < k {
            self.stale[0] = old;
        }
        (masses, total)
    }
}

/// Each topic's `q` term, `coefficient · max(n_wk, 0)` (`n_wk` one less for the token's
/// current topic `old`, if below `K`), into `mass`; then into `cumulative` the running sum
/// at the end of each block of 8 terms (each block summed by [`block_sum`]); returns the
/// total. Compiled for AVX2 too, chosen at run time: each term is the one scalar
/// multiplication and the sums add in one order, so nothing depends on the CPU.
#[multiversion::multiversion(targets("x86_64+avx2"))]
fn q_mass(
    mass: &mut [f32],
    (word_topic, coefficient): (&[i32], &[f32]),
    old: usize,
    cumulative: &mut [f64],
) -> f64 {
    for ((m, &n), &c) in mass.iter_mut().zip(word_topic).zip(coefficient) {
        *m = c * n.max(0) as f32;
    }
    if let (Some(m), Some(&n), Some(&c)) =
        (mass.get_mut(old), word_topic.get(old), coefficient.get(old))
    {
        *m = c * (n - 1).max(0) as f32;
    }
    let mut q = 0.0;
    for (c, chunk) in cumulative.iter_mut().zip(mass.chunks(8)) {
        q += f64::from(block_sum(chunk));
        *c = q;
    }
    q
}

/// The sum of one block of (at most 8) `q` terms: for a whole block the last of its
/// [`prefix8`] sums, so a draw within the block ends exactly where the block does.
/// Summed in topic order, the `K` additions of a token were one chain of dependent
/// additions, which bounded the sampler's speed; as a tree, the blocks' sums overlap and
/// only the running sum over blocks is a chain.
#[inline(always)]
fn block_sum(chunk: &[f32]) -> f32 {
    match <&[f32; 8]>::try_from(chunk) {
        Ok(c) => prefix8(c)[7],
        Err(_) => chunk.iter().sum(),
    }
}

/// The running sums of a block of 8 non-negative terms, added as a tree four additions
/// deep (instead of a chain of eight) such that each sum is a rounded addition of a
/// non-negative term to an earlier one: they never decrease, and a zero term leaves the
/// running sum unchanged (so a topic without mass is never drawn).
#[inline(always)]
fn prefix8(c: &[f32; 8]) -> [f32; 8] {
    let (s01, s23, s45, s67) = (c[0] + c[1], c[2] + c[3], c[4] + c[5], c[6] + c[7]);
    let p3 = s01 + s23;
    let p5 = p3 + s45;
    [
        c[0],
        s01,
        s01 + c[2],
        p3,
        p3 + c[4],
        p5,
        p5 + c[6],
        p5 + s67,
    ]
}

/// The topic of `mass` (each topic's `q` term) where the running sum first exceeds `u`,
/// given `cumulative`, the running sum at the end of every block of 8 topics (`u` below
/// the last). The block is the number of block sums at most `u`, the topic the number of
/// running sums within the block ([`prefix8`] for a whole block) at most what is left of
/// `u`; both count over a few values without branching. A topic without mass is never
/// taken: its running sum equals the one before it. Where rounding leaves `u` at or past the block's own sum, the
/// block's last topic with mass is taken.
#[inline(always)]
fn draw_in_q(mass: &[f32], cumulative: &[f64], u: f64) -> u32 {
    let blocks = cumulative.len();
    let block = cumulative
        .iter()
        .map(|&c| usize::from(c <= u))
        .sum::<usize>()
        .min(blocks - 1);
    let left = u - if block > 0 {
        cumulative[block - 1]
    } else {
        0.0
    };
    let start = block * 8;
    let chunk = &mass[start..(start + 8).min(mass.len())];
    let mut at = 0;
    if let Ok(whole) = <&[f32; 8]>::try_from(chunk) {
        for p in prefix8(whole) {
            at += usize::from(f64::from(p) <= left);
        }
    } else {
        let mut running = 0.0f32;
        for &m in chunk {
            running += m;
            at += usize::from(f64::from(running) <= left);
        }
    }
    if at < chunk.len() {
        return (start + at) as u32;
    }
    chunk
        .iter()
        .rposition(|&m| m > 0.0)
        .map(|t| start + t)
        .or_else(|| mass.iter().rposition(|&m| m > 0.0))
        .unwrap_or(mass.len() - 1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::lda::TopicSampler;

    /// The dense conditional's unnormalised mass of each topic.
    fn dense_masses(
        cfg: &LdaConfig,
        v: u32,
        nw: &[i32],
        nt: &[i32],
        nd: &[i32],
        old: u32,
    ) -> Vec<f64> {
        let vbeta = f64::from(v) * cfg.beta;
        (0..nw.len())
            .map(|t| {
                let ex = i32::from(t == old as usize);
                (f64::from((nd[t] - ex).max(0)) + cfg.alpha)
                    * (f64::from((nw[t] - ex).max(0)) + cfg.beta)
                    / (f64::from((nt[t] - ex).max(0)) + vbeta)
            })
            .collect()
    }

    #[test]
    fn every_topics_mass_is_the_dense_conditionals_through_a_sweep() {
        for (k, seed) in [(1usize, 1u64), (5, 2), (37, 3)] {
            let cfg = LdaConfig {
                topics: k,
                alpha: 0.3,
                beta: 0.02,
                ..LdaConfig::default()
            };
            let v = 50;
            let mut rng = Rng64::from_key(&[seed]);
            // Stale views may hold negative counts: they read as 0 in both samplers.
            let mut count = |lo: i32, hi: u32| lo + rng.below(hi) as i32;
            let mut nt: Vec<i32> = (0..k).map(|_| count(-2, 60)).collect();
            let mut sampler = SparseSampler::new(&cfg, v);
            sampler.begin(&nt);
            let mut draws = Rng64::from_key(&[seed, 1]);
            for doc in 0..6 {
                let mut nd: Vec<i32> = (0..k)
                    .map(|t| if (t + doc) % 3 == 0 { count(-1, 8) } else { 0 })
                    .collect();
                sampler.start_doc(&nt, &nd);
                for _ in 0..40 {
                    let nw: Vec<i32> = (0..k)
                        .map(|t| {
                            if (t * 7 + doc) % 4 == 0 {
                                count(-1, 9)
                            } else {
                                0
                            }
                        })
                        .collect();
                    let old = match draws.below(k as u32 + 1) {
                        o if o as usize == k => u32::MAX,
                        o => o,
                    };
                    let want = dense_masses(&cfg, v, &nw, &nt, &nd, old);
                    let (got, total) = sampler.clone().masses(&nw, &nt, &nd, old);
                    // q's terms are single precision (relative rounding 2^-24 each, a
                    // few of them in a product); the rest is double.
                    for t in 0..k {
                        assert!(
                            (got[t] - want[t]).abs() <= 1e-6 * want[t],
                            "K {k}, topic {t}: {} vs {}",
                            got[t],
                            want[t]
                        );
                    }
                    let sum: f64 = want.iter().sum();
                    assert!(
                        (total - sum).abs() <= 1e-6 * sum,
                        "K {k}: total {total} vs {sum}"
                    );
                    let new = sampler.sample(&nw, &nt, &nd, old, &mut draws) as usize;
                    assert!(new < k);
                    if (old as usize) < k {
                        nt[old as usize] -= 1;
                        nd[old as usize] -= 1;
                    }
                    nt[new] += 1;
                    nd[new] += 1;
                }
            }
        }
    }

    #[test]
    fn draws_follow_the_conditional_like_the_dense_samplers() {
        let cfg = LdaConfig {
            topics: 6,
            alpha: 0.5,
            beta: 0.1,
            ..LdaConfig::default()
        };
        let (nw, nt, nd) = ([3, 0, 1, 6, 0, 2], [10, 4, 8, 20, 3, 9], [2, 1, 0, 5, 0, 0]);
        for old in [0, 3, 5, u32::MAX] {
            let mut want = dense_masses(&cfg, 10, &nw, &nt, &nd, old);
            let total: f64 = want.iter().sum();
            want.iter_mut().for_each(|p| *p /= total);
            let mut sparse = SparseSampler::new(&cfg, 10);
            sparse.begin(&nt);
            sparse.start_doc(&nt, &nd);
            let mut dense = TopicSampler::new(&cfg, 10);
            let n = 200_000;
            let (mut got, mut dense_got) = (vec![0.0; 6], vec![0.0; 6]);
            let (mut a, mut b) = (Rng64::from_key(&[9]), Rng64::from_key(&[9]));
            for _ in 0..n {
                // The counts do not change between draws: each is from the same state.
                got[sparse.sample(&nw, &nt, &nd, old, &mut a) as usize] += 1.0 / f64::from(n);
                dense_got[dense.sample(&nw, &nt, &nd, old, &mut b) as usize] += 1.0 / f64::from(n);
            }
            // 200 000 draws: a frequency's standard deviation is at most 0.0012.
            for t in 0..6 {
                assert!(
                    (got[t] - want[t]).abs() < 0.005,
                    "old {old}: {got:?} vs {want:?}"
                );
                assert!(
                    (got[t] - dense_got[t]).abs() < 0.007,
                    "old {old}: {got:?} vs {dense_got:?}"
                );
            }
        }
    }
    #[test]
    fn a_draw_in_q_takes_the_topic_whose_running_sum_first_exceeds_u() {
        // Integer masses, so every running sum is exact and the pick is determined.
        let mut rng = Rng64::from_key(&[5]);
        for k in [1usize, 3, 8, 9, 17, 100] {
            for _ in 0..200 {
                let mass: Vec<f32> = (0..k)
                    .map(|_| match rng.below(3) {
                        0 => 0.0,
                        _ => rng.below(20) as f32,
                    })
                    .collect();
                let total: f64 = mass.iter().map(|&m| f64::from(m)).sum();
                if total == 0.0 {
                    continue;
                }
                let mut cumulative = Vec::new();
                let mut q = 0.0;
                for chunk in mass.chunks(8) {
                    q += f64::from(block_sum(chunk));
                    cumulative.push(q);
                }
                for u in (0..total as u32).map(f64::from).chain([total - 0.5]) {
                    let mut running = 0.0;
                    let want = mass
                        .iter()
                        .position(|&m| {
                            running += f64::from(m);
                            running > u
                        })
                        .unwrap();
                    let got = draw_in_q(&mass, &cumulative, u) as usize;
                    assert_eq!(got, want, "K {k}, u {u}, {mass:?}");
                    assert!(mass[got] > 0.0);
                }
            }
        }
    }

    #[test]
    fn a_blocks_running_sums_never_decrease_and_skip_topics_without_mass() {
        let mut rng = Rng64::from_key(&[6]);
        for _ in 0..2000 {
            let c: [f32; 8] = std::array::from_fn(|_| match rng.below(3) {
                0 => 0.0,
                _ => (rng.next_f64() * 10f64.powi(rng.below(9) as i32 - 4)) as f32,
            });
            let p = prefix8(&c);
            assert_eq!(p[7], block_sum(&c), "{c:?}");
            for i in 1..8 {
                assert!(p[i] >= p[i - 1], "{c:?} -> {p:?}");
                if c[i] == 0.0 {
                    assert_eq!(p[i], p[i - 1], "{c:?} -> {p:?}");
                }
            }
            // Any u within the block draws a topic with mass.
            let cumulative = [f64::from(p[7])];
            for j in 0..50 {
                let u = f64::from(p[7]) * f64::from(j) / 50.0;
                if p[7] > 0.0 {
                    let got = draw_in_q(&c, &cumulative, u) as usize;
                    assert!(c[got] > 0.0, "u {u} drew {got} of {c:?}");
                }
            }
        }
    }

    #[test]
    fn q_masses_are_the_scalar_products_and_sums_on_any_cpu() {
        // On a CPU with AVX2 this runs the vector clone: it must give the scalar bits.
        let mut rng = Rng64::from_key(&[7]);
        for k in [1usize, 7, 8, 9, 100, 1000] {
            let n: Vec<i32> = (0..k).map(|_| rng.below(40) as i32 - 5).collect();
            let c: Vec<f32> = (0..k).map(|_| rng.next_f64() as f32 * 3.0).collect();
            let old = rng.below(k as u32 + 1) as usize;
            let mut got = vec![f32::NAN; k];
            let mut cumulative = vec![0.0; k.div_ceil(8)];
            let q = q_mass(&mut got, (&n, &c), old, &mut cumulative);
            let mut want_q = 0.0;
            for t in 0..k {
                let count = if t == old { n[t] - 1 } else { n[t] };
                let want = c[t] * count.max(0) as f32;
                assert_eq!(got[t].to_bits(), want.to_bits(), "K {k}, topic {t}");
            }
            for (b, chunk) in got.chunks(8).enumerate() {
                want_q += f64::from(block_sum(chunk));
                assert_eq!(
                    cumulative[b].to_bits(),
                    want_q.to_bits(),
                    "K {k}, block {b}"
                );
            }
            assert_eq!(q.to_bits(), want_q.to_bits());
        }
    }
}
