//! Mapping the segments of a layer to the workers of a model replica, and the remote traffic
//! a mapping causes (section 5.3, "optimizing segment-worker mapping").
//!
//! Layer `l − 1` (the *lower* layer) has `P0 × R0` segment copies; copy `(p, r)` is on worker
//! `r × P0 + p` (any injective placement is the same up to renaming the workers, which are
//! identical). A mapping places each copy `(p, r)` of layer `l` (the *upper* layer), index
//! `r × P1 + p`, on its own worker (C3); the threads of a copy share its worker (C4).
//!
//! Samples go to the copies of a layer round-robin (sample `s` to copy `s mod R`), so a copy
//! `r1` of the upper layer finds its samples' activations in lower copy `r0` with
//! probability `g / R0` when `r0 ≡ r1 (mod g)`, `g = gcd(R0, R1)`, and never otherwise.
//! Stripes are uniform fractions of a layer's [`Shape::rows`] (neurons, kernels or channels);
//! a [`Connectivity::Full`] layer's stripe reads all of the layer below, a
//! [`Connectivity::Local`] one's the same stripe below plus its halo. Counts are expected
//! values per sample.
//!
//! [`traffic`] evaluates a mapping: `A`, the remote activations the slowest upper copy
//! receives (eq. 6), and `E`, the remote error terms the slowest lower copy receives (eq. 7).
//! Mappings are compared by the remote bits of those two slowest copies, then by `A`.
//! [`greedy`] gives every upper copy, in order, the free worker where it finds the most of
//! its inputs (O(N) per copy, O(N²) in all); where a copy's best worker was already taken
//! (a tie the paper expects to be rare) it also solves the maximum-weight bipartite matching
//! (Hungarian algorithm, O(N³)) and keeps the better of the two. [`exhaustive`] tries every
//! injective mapping; it is the oracle the tests compare against.
//!
//! A worker holding no lower copy is as good as any other such worker, and, since gains are
//! never negative, as good as a lower copy's worker the upper copy gains nothing from; so
//! only `max(P0 × R0, P1 × R1) ≤ N_wr` workers are ever considered, and the result does not
//! depend on `N_wr`.

use crate::model::{Connectivity, Shape, Traffic};

/// How a layer is split: `P` stripes times `R` copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Split {
    /// `P`: stripes.
    pub partitions: u32,
    /// `R`: copies.
    pub replications: u32,
}

impl Split {
    /// `P × R`: the workers the layer occupies.
    pub fn copies(&self) -> usize {
        (self.partitions * self.replications) as usize
    }

    /// `(stripe, copy)` of copy index `i`.
    fn of(&self, i: usize) -> (u32, u32) {
        let p = self.partitions as usize;
        ((i % p) as u32, (i / p) as u32)
    }
}

/// A layer pair: the lower layer's and the upper layer's shapes and splits.
#[derive(Debug, Clone, Copy)]
pub struct Pair<'a> {
    /// Layer `l − 1`.
    pub lower: &'a Shape,
    /// Layer `l`.
    pub upper: &'a Shape,
    /// How layer `l − 1` is split.
    pub lower_split: Split,
    /// How layer `l` is split.
    pub upper_split: Split,
}

/// A mapping with the traffic it causes.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    /// `workers[i]`: the worker of upper copy `i`.
    pub workers: Vec<usize>,
    /// The traffic it causes.
    pub traffic: Traffic,
}

/// The length of `[a, b) ∩ [c, d)`.
fn overlap((a, b): (f64, f64), (c, d): (f64, f64)) -> f64 {
    (b.min(d) - a.max(c)).max(0.0)
}

/// Stripe `p` of `partitions` as a fraction of the rows.
fn stripe(p: u32, partitions: u32) -> (f64, f64) {
    let n = f64::from(partitions);
    (f64::from(p) / n, f64::from(p + 1) / n)
}

/// Greatest common divisor.
fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The probability that a sample of copy `mine` (of `r_mine` copies) was handled by copy
/// `other` (of `r_other` copies) of the neighbouring layer.
fn share(mine: u32, r_mine: u32, other: u32, r_other: u32) -> f64 {
    let g = gcd(r_mine, r_other);
    if mine % g == other % g {
        f64::from(g) / f64::from(r_other)
    } else {
        0.0
    }
}

impl Pair<'_> {
    /// The rows below that upper stripe `p` reads.
    fn inputs(&self, p: u32) -> (f64, f64) {
        let (a, b) = stripe(p, self.upper_split.partitions);
        match self.upper.connectivity {
            Connectivity::Full => (0.0, 1.0),
            Connectivity::Local { halo } => (a, (b + halo).min(1.0)),
        }
    }

    /// The upper rows that read lower stripe `p`.
    fn readers(&self, p: u32) -> (f64, f64) {
        let (a, b) = stripe(p, self.lower_split.partitions);
        match self.upper.connectivity {
            Connectivity::Full => (0.0, 1.0),
            Connectivity::Local { halo } => ((a - halo).max(0.0), b),
        }
    }

    /// Activations upper copy `up` finds locally when it shares a worker with lower copy `low`.
    fn local_activations(&self, up: usize, low: usize) -> f64 {
        let ((p1, r1), (p0, r0)) = (self.upper_split.of(up), self.lower_split.of(low));
        let (l, u) = (self.lower_split, self.upper_split);
        self.lower.neurons
            * overlap(self.inputs(p1), stripe(p0, l.partitions))
            * share(r1, u.replications, r0, l.replications)
    }

    /// Error terms lower copy `low` finds locally when it shares a worker with upper copy `up`.
    fn local_errors(&self, up: usize, low: usize) -> f64 {
        let ((p1, r1), (p0, r0)) = (self.upper_split.of(up), self.lower_split.of(low));
        let (l, u) = (self.lower_split, self.upper_split);
        self.upper.neurons
            * overlap(self.readers(p0), stripe(p1, u.partitions))
            * share(r0, l.replications, r1, u.replications)
    }

    /// Bits that stay local when upper copy `up` is placed on worker `w`.
    fn local_bits(&self, up: usize, w: usize) -> f64 {
        if w >= self.lower_split.copies() {
            return 0.0;
        }
        self.local_activations(up, w) * self.lower.bits + self.local_errors(up, w) * self.upper.bits
    }

    /// Workers worth considering: every lower copy's, plus enough free workers for every
    /// upper copy. A worker holding no lower copy or a lower copy an upper copy gains
    /// nothing from are alike, so `max(P0 × R0, P1 × R1)` workers lose no mapping's traffic.
    fn candidate_workers(&self) -> usize {
        self.lower_split.copies().max(self.upper_split.copies())
    }
}

/// The traffic of mapping `workers` (upper copy `i` on worker `workers[i]`, all distinct).
pub fn traffic(pair: &Pair, workers: &[usize]) -> Traffic {
    let (l, u) = (pair.lower_split, pair.upper_split);
    let mut upper_on = vec![
        None;
        pair.candidate_workers()
            .max(workers.iter().max().map_or(0, |w| w + 1))
    ];
    for (i, &w) in workers.iter().enumerate() {
        upper_on[w] = Some(i);
    }
    let mut activations: f64 = 0.0;
    for (up, &w) in workers.iter().enumerate() {
        let (p1, _) = u.of(up);
        let (a, b) = pair.inputs(p1);
        let local = if w < l.copies() {
            pair.local_activations(up, w)
        } else {
            0.0
        };
        activations = activations.max(pair.lower.neurons * (b - a) - local);
    }
    let mut errors: f64 = 0.0;
    for (low, on) in upper_on.iter().enumerate().take(l.copies()) {
        let (p0, _) = l.of(low);
        let (a, b) = pair.readers(p0);
        let local = on.map_or(0.0, |up| pair.local_errors(up, low));
        errors = errors.max(pair.upper.neurons * (b - a) - local);
    }
    Traffic {
        activations: activations.max(0.0),
        errors: errors.max(0.0),
    }
}

/// True if `a` is a better mapping than `b`: fewer remote bits at the slowest copies, then
/// fewer remote activations (relative tolerance 1e-9).
pub fn better(pair: &Pair, a: &Traffic, b: &Traffic) -> bool {
    let bits = |t: &Traffic| t.activations * pair.lower.bits + t.errors * pair.upper.bits;
    let (x, y) = (bits(a), bits(b));
    let tol = 1e-9 * x.abs().max(y.abs()).max(1.0);
    if (x - y).abs() > tol {
        return x < y;
    }
    a.activations < b.activations - 1e-9 * a.activations.abs().max(b.activations.abs()).max(1.0)
}

/// Each upper copy in order on the free worker where it keeps the most bits local (the
/// lowest such worker on equal gains); true as well if some copy's best worker was taken.
fn greedy_pass(pair: &Pair) -> (Vec<usize>, bool) {
    let n = pair.candidate_workers();
    let copies = pair.upper_split.copies();
    let mut taken = vec![false; n];
    let mut workers = Vec::with_capacity(copies);
    let mut tie = false;
    for up in 0..copies {
        let mut best: Option<(usize, f64)> = None;
        let mut unconstrained: f64 = 0.0;
        for (w, &is_taken) in taken.iter().enumerate() {
            let gain = pair.local_bits(up, w);
            unconstrained = unconstrained.max(gain);
            if !is_taken && best.is_none_or(|(_, g)| gain > g) {
                best = Some((w, gain));
            }
        }
        let (w, gain) = best.expect("there are more candidate workers than copies");
        tie |= gain < unconstrained;
        taken[w] = true;
        workers.push(w);
    }
    (workers, tie)
}

/// The greedy mapping, with the matching fallback when a copy's best worker was taken.
pub fn greedy(pair: &Pair) -> Mapping {
    let (workers, tie) = greedy_pass(pair);
    let n = pair.candidate_workers();
    let copies = pair.upper_split.copies();
    let greedy = Mapping {
        traffic: traffic(pair, &workers),
        workers,
    };
    if !tie {
        return greedy;
    }
    let gains: Vec<Vec<f64>> = (0..copies)
        .map(|up| (0..n).map(|w| pair.local_bits(up, w)).collect())
        .collect();
    let matched = hungarian_max(&gains);
    let matching = Mapping {
        traffic: traffic(pair, &matched),
        workers: matched,
    };
    if better(pair, &matching.traffic, &greedy.traffic) {
        matching
    } else {
        greedy
    }
}

/// Places every copy of every layer of a model replica on one of its workers, composing the
/// [`greedy`] mappings layer by layer: `workers[l][r × P(l) + p]` is the worker of copy
/// `(p, r)` of layer `l`. Layer 0's copy `i` is on worker `i`. An upper copy the mapping
/// puts on a lower copy's worker goes to that worker; the copies it puts on free workers
/// get, in the order of the mapping's free-worker indices, the lowest-numbered workers
/// that hold no copy of the layer below and none of this layer yet. The replica needs
/// `max_l P(l) × R(l)` workers. This is how the DNN app places a plan's segments, and the
/// traffic the optimizer estimated for each pair of layers is this mapping's.
pub fn assign(shapes: &[Shape], splits: &[Split]) -> Vec<Vec<usize>> {
    assert_eq!(shapes.len(), splits.len(), "one split per layer");
    let mut out: Vec<Vec<usize>> = Vec::with_capacity(splits.len());
    for (l, split) in splits.iter().enumerate() {
        if l == 0 {
            out.push((0..split.copies()).collect());
            continue;
        }
        let lower = &out[l - 1];
        let pair = Pair {
            lower: &shapes[l - 1],
            upper: &shapes[l],
            lower_split: splits[l - 1],
            upper_split: *split,
        };
        let mapping = greedy(&pair);
        let mut free_order: Vec<usize> = mapping
            .workers
            .iter()
            .copied()
            .filter(|&w| w >= lower.len())
            .collect();
        free_order.sort_unstable();
        let mut fresh = (0..).filter(|w| !lower.contains(w));
        let fresh_of: Vec<(usize, usize)> = free_order
            .iter()
            .map(|&w| (w, fresh.next().expect("unbounded")))
            .collect();
        out.push(
            mapping
                .workers
                .iter()
                .map(|&w| {
                    if w < lower.len() {
                        lower[w]
                    } else {
                        fresh_of.iter().find(|(f, _)| *f == w).expect("mapped").1
                    }
                })
                .collect(),
        );
    }
    out
}

/// The best mapping by trying every injective one onto `P0 × R0 + P1 × R1` workers (every
/// lower copy's and a free one per upper copy: not relying on the argument that fewer
/// suffice). Exponential: tests only.
pub fn exhaustive(pair: &Pair) -> Mapping {
    let n = pair.lower_split.copies() + pair.upper_split.copies();
    let copies = pair.upper_split.copies();
    let mut best: Option<Mapping> = None;
    let mut current = Vec::with_capacity(copies);
    let mut used = vec![false; n];
    fn walk(
        pair: &Pair,
        n: usize,
        copies: usize,
        current: &mut Vec<usize>,
        used: &mut [bool],
        best: &mut Option<Mapping>,
    ) {
        if current.len() == copies {
            let t = traffic(pair, current);
            if best.as_ref().is_none_or(|b| better(pair, &t, &b.traffic)) {
                *best = Some(Mapping {
                    workers: current.clone(),
                    traffic: t,
                });
            }
            return;
        }
        for w in 0..n {
            if !used[w] {
                used[w] = true;
                current.push(w);
                walk(pair, n, copies, current, used, best);
                current.pop();
                used[w] = false;
            }
        }
    }
    walk(pair, n, copies, &mut current, &mut used, &mut best);
    best.expect("at least one mapping")
}

/// The assignment of rows to distinct columns maximising the summed gain (`rows ≤ columns`),
/// by the Hungarian algorithm (O(rows² × columns)); returns each row's column.
fn hungarian_max(gain: &[Vec<f64>]) -> Vec<usize> {
    let rows = gain.len();
    let cols = gain.first().map_or(0, Vec::len);
    let cost = |i: usize, j: usize| -gain[i - 1][j - 1];
    // Potentials and matching over 1-based rows and columns; column 0 is the sentinel.
    let (mut u, mut v) = (vec![0.0; rows + 1], vec![0.0; cols + 1]);
    let (mut matched, mut way) = (vec![0usize; cols + 1], vec![0usize; cols + 1]);
    for i in 1..=rows {
        matched[0] = i;
        let mut j0 = 0;
        let mut min = vec![f64::INFINITY; cols + 1];
        let mut used = vec![false; cols + 1];
        loop {
            used[j0] = true;
            let i0 = matched[j0];
            let (mut delta, mut j1) = (f64::INFINITY, 0);
            for j in 1..=cols {
                if !used[j] {
                    let cur = cost(i0, j) - u[i0] - v[j];
                    if cur < min[j] {
                        min[j] = cur;
                        way[j] = j0;
                    }
                    if min[j] < delta {
                        delta = min[j];
                        j1 = j;
                    }
                }
            }
            for j in 0..=cols {
                if used[j] {
                    u[matched[j]] += delta;
                    v[j] -= delta;
                } else {
                    min[j] -= delta;
                }
            }
            j0 = j1;
            if matched[j0] == 0 {
                break;
            }
        }
        loop {
            let j1 = way[j0];
            matched[j0] = matched[j1];
            j0 = j1;
            if j0 == 0 {
                break;
            }
        }
    }
    let mut of_row = vec![0; rows];
    for j in 1..=cols {
        if matched[j] != 0 {
            of_row[matched[j] - 1] = j - 1;
        }
    }
    of_row
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fc(n: f64) -> Shape {
        Shape {
            name: "fc".into(),
            kind: crate::spec::LayerKind::FullyConnected,
            neurons: n,
            rows: n as u64,
            connections: n * n,
            params: n * n,
            bits: 32.0,
            below: n,
            connectivity: Connectivity::Full,
        }
    }

    fn split(p: u32, r: u32) -> Split {
        Split {
            partitions: p,
            replications: r,
        }
    }

    #[test]
    fn aligned_full_layers_keep_one_stripe_local() {
        let (a, b) = (fc(100.0), fc(50.0));
        let pair = Pair {
            lower: &a,
            upper: &b,
            lower_split: split(2, 1),
            upper_split: split(2, 1),
        };
        let m = greedy(&pair);
        assert_eq!(m.workers, vec![0, 1]);
        assert!((m.traffic.activations - 50.0).abs() < 1e-9);
        assert!((m.traffic.errors - 25.0).abs() < 1e-9);
    }

    #[test]
    fn a_replicated_upper_layer_finds_half_its_samples_local() {
        let (a, b) = (fc(100.0), fc(10.0));
        let pair = Pair {
            lower: &a,
            upper: &b,
            lower_split: split(1, 2),
            upper_split: split(1, 2),
        };
        let m = greedy(&pair);
        assert_eq!(
            m.traffic,
            Traffic {
                activations: 0.0,
                errors: 0.0
            },
            "copies aligned by sample"
        );
    }

    #[test]
    fn assign_composes_the_mappings_onto_distinct_workers_per_layer() {
        let shapes = [fc(100.0), fc(50.0), fc(10.0), fc(10.0)];
        let splits = [split(2, 1), split(2, 1), split(1, 3), split(4, 1)];
        let w = assign(&shapes, &splits);
        assert_eq!(w[0], vec![0, 1]);
        // Aligned stripes stay on their lower stripe's worker.
        assert_eq!(w[1], vec![0, 1]);
        assert_eq!(w.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 2, 3, 4]);
        for (l, layer) in w.iter().enumerate() {
            let mut seen = layer.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), layer.len(), "layer {l}: one copy per worker");
            assert!(
                layer.iter().all(|&x| x < 4),
                "layer {l}: within max P x R = 4"
            );
        }
        // One copy everywhere: everything on worker 0.
        let one = assign(&shapes, &[split(1, 1); 4]);
        assert!(one.iter().all(|l| l == &vec![0]));
    }

    #[test]
    fn pooling_reads_its_own_channels_and_a_convolution_all_of_them() {
        let s = crate::model::shapes(&crate::builtin::cnn());
        let (conv1, pool1, conv2) = (&s[0], &s[1], &s[2]);
        let pair = |lower, upper| Pair {
            lower,
            upper,
            lower_split: split(2, 1),
            upper_split: split(2, 1),
        };
        // Halves of conv1's 16 kernels under halves of pool1's 16 channels: all local.
        let t = greedy(&pair(conv1, pool1)).traffic;
        assert_eq!((t.activations, t.errors), (0.0, 0.0));
        // conv2's kernels each read all 16 channels of pool1: the other half is remote,
        // and each half of pool1 has its error terms from both halves of conv2.
        let t = greedy(&pair(pool1, conv2)).traffic;
        assert!((t.activations - pool1.neurons / 2.0).abs() < 1e-9);
        assert!((t.errors - conv2.neurons / 2.0).abs() < 1e-9);
    }

    #[test]
    fn hungarian_finds_the_best_assignment() {
        let gain = vec![vec![3.0, 3.0, 0.0], vec![3.0, 0.0, 0.0]];
        assert_eq!(hungarian_max(&gain), vec![1, 0]);
    }

    #[test]
    fn the_matching_fallback_fixes_what_greedy_alone_gets_wrong() {
        // Local stripes that do not line up (3 over 2, 4 over 3): greedy alone, copy by
        // copy, can take a worker a later copy needed more; the matching repairs that.
        let (a, b) = (
            fc(12.0),
            Shape {
                connectivity: Connectivity::Local { halo: 0.0 },
                ..fc(12.0)
            },
        );
        let mut wrong = 0;
        for (p0, r0, p1, r1) in [
            (2, 1, 3, 1),
            (3, 1, 2, 1),
            (2, 2, 3, 1),
            (3, 1, 4, 1),
            (2, 1, 2, 2),
            (4, 1, 3, 1),
        ] {
            let pair = Pair {
                lower: &a,
                upper: &b,
                lower_split: split(p0, r0),
                upper_split: split(p1, r1),
            };
            let (alone, _) = greedy_pass(&pair);
            let best = exhaustive(&pair);
            wrong += usize::from(better(&pair, &best.traffic, &traffic(&pair, &alone)));
            assert!(
                !better(&pair, &best.traffic, &greedy(&pair).traffic),
                "{p0}x{r0} -> {p1}x{r1}"
            );
        }
        assert!(wrong > 0, "these pairs exercise the fallback");
    }

    #[test]
    fn greedy_matches_exhaustive_on_small_pairs() {
        let local = Shape {
            connectivity: Connectivity::Local { halo: 0.1 },
            ..fc(30.0)
        };
        let shapes = [fc(12.0), fc(7.0), local];
        for lower in &shapes {
            for upper in &shapes {
                for (p0, r0, p1, r1) in [
                    (1, 1, 2, 1),
                    (2, 1, 3, 1),
                    (3, 1, 2, 2),
                    (2, 2, 1, 3),
                    (1, 3, 2, 1),
                    (2, 1, 4, 1),
                ] {
                    let pair = Pair {
                        lower,
                        upper,
                        lower_split: split(p0, r0),
                        upper_split: split(p1, r1),
                    };
                    let (g, e) = (greedy(&pair), exhaustive(&pair));
                    assert!(
                        !better(&pair, &e.traffic, &g.traffic),
                        "{p0}x{r0} -> {p1}x{r1}: {g:?} vs {e:?}"
                    );
                }
            }
        }
    }
}
