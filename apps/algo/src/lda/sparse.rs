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
//! eight topics an instruction under AVX2; `s`, `r` and the running sums over lanes stay
//! double). The terms are summed in [`LANES`] interleaved lanes (lane `j` holds topics
//! `j, j + 8, j + 16, …`), so summing them is one vector addition per 8 topics and the
//! running sum within every lane comes out of the same additions; a draw in `q` counts the
//! lanes' running sums below it, then the running sums within one lane (no chain of
//! subtractions, no mispredicted exit). `s`'s draw walks all topics, in the rare case a
//! draw falls there (`αβ` is small). Counts that a stale view makes
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

/// Interleaved lanes `q`'s terms are summed in: lane `j` holds topics `j, j + LANES, …`
/// (8: one AVX2 vector of single-precision terms).
const LANES: usize = 8;

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
    /// Scratch, `K` rounded up to [`LANES`] entries: for each topic `t`, the running sum
    /// of the `q` terms of its lane (`t mod LANES`) up to and including it, for the
    /// token (single precision: twice the terms per vector instruction; the padding
    /// topics have no mass).
    running: Vec<f32>,
    /// Scratch: the `q` mass of the lanes up to and including each.
    lane_mass: [f64; LANES],
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
            running: vec![0.0; k.div_ceil(LANES) * LANES],
            lane_mass: [0.0; LANES],
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
        // branches so the loop vectorizes, summed in lanes: each lane's running sums and
        // the q mass up to the end of each lane, so that a draw finds its lane and then
        // its topic by counting the running sums at most `u`: no walk of dependent
        // subtractions, no branch to mispredict.
        let terms = (&word_topic[..k], &self.coefficient[..k]);
        let q = q_mass(&mut self.running, terms, old as usize, &mut self.lane_mass);
        let (s, r) = (self.s.max(0.0), self.r.max(0.0));
        let u = rng.next_f64() * (q + r + s);
        let new = if u < q {
            draw_in_q(&self.running, &self.lane_mass, u)
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
/// current topic `old`, if below `K`), summed per lane ([`LANES`]): into `running`
/// (`K` rounded up to `LANES` entries) each topic's running sum within its lane, and into
/// `cumulative` the `q` mass up to the end of each lane; returns the total. Under AVX2 a
/// group of `LANES` topics is one vector ([`q_mass_avx2`]); each term is the one
/// multiplication and each sum adds in one order, so the bits are [`q_mass_scalar`]'s on
/// any CPU.
///
/// # Panics
/// If `running` is shorter than `K` rounded up to `LANES`.
#[inline(always)]
fn q_mass(
    running: &mut [f32],
    (word_topic, coefficient): (&[i32], &[f32]),
    old: usize,
    cumulative: &mut [f64; LANES],
) -> f64 {
    let k = word_topic.len().min(coefficient.len());
    let running = &mut running[..k.div_ceil(LANES) * LANES];
    let terms = (&word_topic[..k], &coefficient[..k]);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2; `running` is `K` rounded up to LANES long, both
        // rows `K`.
        return unsafe { q_mass_avx2(running, terms, old, cumulative) };
    }
    q_mass_scalar(running, terms, old, cumulative)
}

/// [`q_mass`] one topic at a time (any CPU; the reference of [`q_mass_avx2`]): `running`
/// is `K` rounded up to [`LANES`] long, both rows `K`.
fn q_mass_scalar(
    running: &mut [f32],
    (word_topic, coefficient): (&[i32], &[f32]),
    old: usize,
    cumulative: &mut [f64; LANES],
) -> f64 {
    let k = word_topic.len();
    let mut lanes = [0.0f32; LANES];
    for (g, out) in running.chunks_exact_mut(LANES).enumerate() {
        // The padding topics of the last group add no mass.
        for (j, t) in (g * LANES..k.min((g + 1) * LANES)).enumerate() {
            let n = word_topic[t] - i32::from(t == old);
            lanes[j] += coefficient[t] * n.max(0) as f32;
        }
        out.copy_from_slice(&lanes);
    }
    running_over_lanes(&lanes, cumulative)
}

/// The lanes' masses added up lane after lane into `cumulative`; returns the total.
#[inline(always)]
fn running_over_lanes(lanes: &[f32; LANES], cumulative: &mut [f64; LANES]) -> f64 {
    let mut q = 0.0;
    for (c, &lane) in cumulative.iter_mut().zip(lanes) {
        q += f64::from(lane);
        *c = q;
    }
    q
}

/// [`q_mass_scalar`] a group of eight topics an instruction: the counts clamped and
/// converted, multiplied and added as vectors; the old topic's count made one less by a
/// one-hot vector in its group, the last group's padding read as zeros.
///
/// # Safety
/// The CPU must have AVX2; `running` must be `K` rounded up to [`LANES`] long, both rows
/// `K`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn q_mass_avx2(
    running: &mut [f32],
    (word_topic, coefficient): (&[i32], &[f32]),
    old: usize,
    cumulative: &mut [f64; LANES],
) -> f64 {
    use std::arch::x86_64::*;
    let k = word_topic.len();
    debug_assert!(coefficient.len() == k && running.len() == k.div_ceil(LANES) * LANES);
    let (old_group, old_lane) = (old / LANES, (old % LANES) as i32);
    let lane_ids = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    // -1 in the old topic's lane, 0 elsewhere.
    let minus_old = _mm256_cmpeq_epi32(lane_ids, _mm256_set1_epi32(old_lane));
    let zero = _mm256_setzero_si256();
    let (n_ptr, c_ptr, out) = (
        word_topic.as_ptr(),
        coefficient.as_ptr(),
        running.as_mut_ptr(),
    );
    let mut sum = _mm256_setzero_ps();
    let add = |g: usize, n: __m256i, c: __m256, sum: __m256| {
        let n = if g == old_group {
            _mm256_add_epi32(n, minus_old)
        } else {
            n
        };
        let n = _mm256_cvtepi32_ps(_mm256_max_epi32(n, zero));
        _mm256_add_ps(sum, _mm256_mul_ps(c, n))
    };
    let whole = k / LANES;
    for g in 0..whole {
        let at = g * LANES;
        // SAFETY: the group `at..at + LANES` is within both rows (`K` long) and within
        // `running` (`K` rounded up to LANES long), the caller's contract.
        let (n, c) = unsafe {
            (
                _mm256_loadu_si256(n_ptr.add(at).cast()),
                _mm256_loadu_ps(c_ptr.add(at)),
            )
        };
        sum = add(g, n, c, sum);
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(out.add(at), sum) };
    }
    if whole * LANES < k {
        // The last, partial group, the lanes past `K` masked (read as zeros).
        let at = whole * LANES;
        let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((k - at) as i32), lane_ids);
        // SAFETY: `at < K`, and the masked loads read only the lanes below `K`.
        let (n, c) = unsafe {
            (
                _mm256_maskload_epi32(n_ptr.add(at), mask),
                _mm256_maskload_ps(c_ptr.add(at), mask),
            )
        };
        sum = add(whole, n, c, sum);
        // SAFETY: `running` is `K` rounded up to LANES long, so the whole last group is in
        // it.
        unsafe { _mm256_storeu_ps(out.add(at), sum) };
    }
    let mut lanes = [0.0f32; LANES];
    // SAFETY: `lanes` is eight `f32`s (256 bits).
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    running_over_lanes(&lanes, cumulative)
}

/// The topic where the running sum of `q`'s terms, taken lane after lane ([`LANES`]),
/// first exceeds `u`, given `running` and `cumulative` as [`q_mass`] leaves them (`u`
/// below the last lane's mass). The lane is the number of lanes' masses at most `u`, the
/// topic the number of running sums within the lane at most what is left of `u`; both
/// count over a few values without branching. Running sums never decrease (each adds a
/// non-negative term), so a topic without mass is never taken: its running sum equals the
/// one before it. Where rounding leaves `u` at or past the lane's own sum, the lane's last
/// topic with mass is taken.
#[inline(always)]
fn draw_in_q(running: &[f32], cumulative: &[f64; LANES], u: f64) -> u32 {
    let lane = cumulative
        .iter()
        .map(|&c| usize::from(c <= u))
        .sum::<usize>()
        .min(LANES - 1);
    let left = u - if lane > 0 { cumulative[lane - 1] } else { 0.0 };
    let groups = running.len() / LANES;
    let mut at = 0;
    for group in running.chunks_exact(LANES) {
        at += usize::from(f64::from(group[lane]) <= left);
    }
    if at < groups {
        return (lane + at * LANES) as u32;
    }
    last_with_mass(running, lane)
        .or_else(|| (0..LANES).rev().find_map(|l| last_with_mass(running, l)))
        .unwrap_or(0) as u32
}

/// The last topic of `lane` whose term is positive (its running sum grows there).
fn last_with_mass(running: &[f32], lane: usize) -> Option<usize> {
    let sum = |group: usize| running[group * LANES + lane];
    (0..running.len() / LANES)
        .rev()
        .find(|&g| sum(g) > if g > 0 { sum(g - 1) } else { 0.0 })
        .map(|g| lane + g * LANES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lda::TopicSampler;

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
    /// `q_mass` of unit coefficients: the terms are the counts (clamped at 0).
    fn lanes_of(counts: &[i32]) -> (Vec<f32>, [f64; LANES], f64) {
        let k = counts.len();
        let mut running = vec![f32::NAN; k.div_ceil(LANES) * LANES];
        let mut cumulative = [0.0; LANES];
        let ones = vec![1.0; k];
        let q = q_mass(&mut running, (counts, &ones), usize::MAX, &mut cumulative);
        (running, cumulative, q)
    }

    /// The topics in the order a draw in `q` walks them: lane after lane.
    fn lane_order(k: usize) -> impl Iterator<Item = usize> {
        (0..LANES).flat_map(move |lane| (lane..k).step_by(LANES))
    }

    #[test]
    fn a_draw_in_q_takes_the_topic_whose_running_sum_first_exceeds_u() {
        // Integer masses, so every running sum is exact and the pick is determined.
        let mut rng = Rng64::from_key(&[5]);
        for k in [1usize, 3, 8, 9, 17, 100] {
            for _ in 0..200 {
                let counts: Vec<i32> = (0..k)
                    .map(|_| match rng.below(3) {
                        0 => 0,
                        _ => rng.below(20) as i32,
                    })
                    .collect();
                let (running, cumulative, total) = lanes_of(&counts);
                if total == 0.0 {
                    continue;
                }
                for u in (0..total as u32).map(f64::from).chain([total - 0.5]) {
                    let mut sum = 0.0;
                    let want = lane_order(k)
                        .find(|&t| {
                            sum += f64::from(counts[t]);
                            sum > u
                        })
                        .unwrap();
                    let got = draw_in_q(&running, &cumulative, u) as usize;
                    assert_eq!(got, want, "K {k}, u {u}, {counts:?}");
                    assert!(counts[got] > 0);
                }
            }
        }
    }

    #[test]
    fn a_lanes_running_sums_never_decrease_and_skip_topics_without_mass() {
        let mut rng = Rng64::from_key(&[6]);
        for k in [5usize, 8, 21, 64] {
            for _ in 0..300 {
                let n: Vec<i32> = (0..k).map(|_| rng.below(3) as i32 - 1).collect();
                let c: Vec<f32> = (0..k)
                    .map(|_| (rng.next_f64() * 10f64.powi(rng.below(9) as i32 - 4)) as f32)
                    .collect();
                let mut running = vec![0.0; k.div_ceil(LANES) * LANES];
                let mut cumulative = [0.0; LANES];
                let q = q_mass(&mut running, (&n, &c), usize::MAX, &mut cumulative);
                for lane in 0..LANES {
                    let mut before = 0.0f32;
                    for (g, group) in running.chunks_exact(LANES).enumerate() {
                        let t = lane + g * LANES;
                        assert!(group[lane] >= before, "K {k}, topic {t}");
                        if t >= k || n[t] <= 0 {
                            assert_eq!(group[lane], before, "K {k}, topic {t} has no mass");
                        }
                        before = group[lane];
                    }
                }
                // Any u below q draws a topic with mass.
                for j in 0..50 {
                    let u = q * f64::from(j) / 50.0;
                    if q > 0.0 {
                        let got = draw_in_q(&running, &cumulative, u) as usize;
                        assert!(got < k && n[got] > 0, "K {k}, u {u} drew {got}");
                    }
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
            let mut got = vec![f32::NAN; k.div_ceil(LANES) * LANES];
            let mut cumulative = [0.0; LANES];
            let q = q_mass(&mut got, (&n, &c), old, &mut cumulative);
            let mut lanes = [0.0f32; LANES];
            for (t, got) in got.iter().enumerate() {
                if t < k {
                    let count = if t == old { n[t] - 1 } else { n[t] };
                    lanes[t % LANES] += c[t] * count.max(0) as f32;
                }
                assert_eq!(
                    got.to_bits(),
                    lanes[t % LANES].to_bits(),
                    "K {k}, topic {t}"
                );
            }
            let mut want_q = 0.0;
            for (lane, &sum) in lanes.iter().enumerate() {
                want_q += f64::from(sum);
                assert_eq!(
                    cumulative[lane].to_bits(),
                    want_q.to_bits(),
                    "K {k}, lane {lane}"
                );
            }
            assert_eq!(q.to_bits(), want_q.to_bits());
        }
    }
}
