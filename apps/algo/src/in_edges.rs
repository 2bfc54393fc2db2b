//! A worker's edges grouped by target, laid out for vector gathers: the sources of each
//! target, in the order the edges were given, stored as a *sliced ELLPACK* matrix
//! (SELL-C-σ with C = 8 and σ = all targets).
//!
//! PageRank's sweep sums, for every target, a value of each of its sources. Scattering
//! `out[t] += x[s]` edge by edge writes all over `out`; summing per target reads the
//! sources' values (a gather, as a sparse matrix–vector product does) and writes `out`
//! once, with half the bytes per edge (one `u32` instead of a pair).
//!
//! **Layout.** The targets are ordered by in-degree (highest first, ties by id) and cut
//! into slices of [`LANES`] targets; a slice stores its `j`-th sources of its eight targets
//! side by side (`sources[offset + 8j + lane]`), as many rows as its largest in-degree,
//! shorter targets padded (the padding is never read as a value). Sorting by degree keeps
//! the padding small: neighbours in a slice have about the same in-degree. One step of
//! the sweep then gathers the next source value of eight targets at once and adds each
//! lane to its own target's sum.
//!
//! **Exactness.** Each lane is one target's sum, started from zero and added in the given
//! order of its sources, so the result is bit-for-bit the scatter's on every CPU: the
//! vector paths (AVX-512 with 8 lanes, AVX2 with two halves of 4; chosen at run time) and
//! the scalar path do the same additions. Padded lanes are masked, never added.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Targets per slice: the lanes of one AVX-512 vector of `f64`s.
pub const LANES: usize = 8;

/// Marks the lane of a last slice that holds no target.
const NO_TARGET: u32 = u32::MAX;

/// One slice of [`LANES`] targets (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slice {
    /// Where the slice's sources start in [`InEdges::sources`].
    offset: u32,
    /// Rows of the slice: its largest in-degree.
    rows: u32,
    /// Each lane's in-degree (0 for an empty lane).
    degrees: [u32; LANES],
    /// Each lane's target ([`NO_TARGET`] for an empty lane).
    targets: [u32; LANES],
}

/// Edges grouped by target (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InEdges {
    /// Number of targets.
    targets: usize,
    /// Number of edges (padding excluded).
    edges: usize,
    slices: Vec<Slice>,
    /// Every slice's sources, row by row, padded with 0.
    sources: Vec<u32>,
    /// One more than the largest source (0 without edges): `values` must be this long.
    needed: usize,
}

impl InEdges {
    /// Groups `(source, target)` edges by target (`target < targets`), keeping their order
    /// within a target.
    ///
    /// # Panics
    /// If a target is out of range or there are `u32::MAX` edges or more.
    pub fn new(targets: usize, edges: &[(u32, u32)]) -> Self {
        assert!(
            edges.len() < u32::MAX as usize && targets < u32::MAX as usize,
            "too many edges or targets for u32 offsets"
        );
        // Grouped by target first (a stable counting sort), as compressed rows.
        let mut starts = vec![0u32; targets + 1];
        for &(_, t) in edges {
            starts[t as usize + 1] += 1;
        }
        for t in 0..targets {
            starts[t + 1] += starts[t];
        }
        let mut next = starts.clone();
        let mut grouped = vec![0u32; edges.len()];
        for &(s, t) in edges {
            let at = &mut next[t as usize];
            grouped[*at as usize] = s;
            *at += 1;
        }
        let degree = |t: u32| starts[t as usize + 1] - starts[t as usize];
        let mut order: Vec<u32> = (0..targets as u32).collect();
        order.sort_by_key(|&t| (std::cmp::Reverse(degree(t)), t));
        let mut slices = Vec::with_capacity(targets.div_ceil(LANES));
        let mut sources = Vec::with_capacity(edges.len() + edges.len() / 4);
        for group in order.chunks(LANES) {
            let mut slice = Slice {
                offset: u32::try_from(sources.len()).expect("padded sources fit u32 offsets"),
                rows: group.iter().map(|&t| degree(t)).max().unwrap_or(0),
                degrees: [0; LANES],
                targets: [NO_TARGET; LANES],
            };
            for (lane, &t) in group.iter().enumerate() {
                slice.degrees[lane] = degree(t);
                slice.targets[lane] = t;
            }
            for j in 0..slice.rows {
                for lane in 0..LANES {
                    let t = slice.targets[lane];
                    let s = if t != NO_TARGET && j < slice.degrees[lane] {
                        grouped[(starts[t as usize] + j) as usize]
                    } else {
                        0
                    };
                    sources.push(s);
                }
            }
            slices.push(slice);
        }
        Self {
            targets,
            edges: edges.len(),
            needed: edges
                .iter()
                .map(|&(s, _)| s as usize + 1)
                .max()
                .unwrap_or(0),
            slices,
            sources,
        }
    }

    /// Number of targets.
    pub fn targets(&self) -> usize {
        self.targets
    }

    /// Number of edges.
    pub fn len(&self) -> usize {
        self.edges
    }

    /// Whether there are no edges.
    pub fn is_empty(&self) -> bool {
        self.edges == 0
    }

    /// Source entries stored, padding included (at least [`len`](Self::len)).
    pub fn stored(&self) -> usize {
        self.sources.len()
    }

    /// `out[t] = Σ values[s]` over target `t`'s sources in their given order, for every
    /// target (0 for a target without edges), with the widest vectors this CPU has.
    ///
    /// # Panics
    /// If `out` is not [`targets`](Self::targets) long or a source is outside `values`.
    pub fn sum_into(&self, values: &[f64], out: &mut [f64]) {
        self.check(values, out);
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                // SAFETY: the CPU has the features; `check` bounds every source by
                // `values.len()` and every target by `out.len()`.
                unsafe { self.sum_avx512(values, out) };
                return;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: as above.
                unsafe { self.sum_avx2(values, out) };
                return;
            }
        }
        self.sum_scalar(values, out);
    }

    /// The asserts that make the vector paths' unchecked gathers and stores sound.
    fn check(&self, values: &[f64], out: &[f64]) {
        assert_eq!(out.len(), self.targets, "one sum per target");
        assert!(
            values.len() >= self.needed,
            "{} values for sources up to {}",
            values.len(),
            self.needed
        );
    }

    /// [`sum_into`](Self::sum_into) one lane at a time (any CPU; the tests' reference
    /// for the vector paths). Indexes with bounds checks, so it needs no
    /// [`check`](Self::check) of its own.
    fn sum_scalar(&self, values: &[f64], out: &mut [f64]) {
        for slice in &self.slices {
            let rows = &self.sources[slice.offset as usize..][..slice.rows as usize * LANES];
            for lane in 0..LANES {
                let t = slice.targets[lane];
                if t == NO_TARGET {
                    continue;
                }
                let mut sum = 0.0;
                for j in 0..slice.degrees[lane] as usize {
                    sum += values[rows[j * LANES + lane] as usize];
                }
                out[t as usize] = sum;
            }
        }
    }

    /// Eight targets per step: one masked gather and one masked add per row of a slice.
    ///
    /// # Safety
    /// The CPU must have AVX-512F and AVX-512VL, and [`check`](Self::check) must hold.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn sum_avx512(&self, values: &[f64], out: &mut [f64]) {
        let base = values.as_ptr();
        let mut lanes = [0.0f64; LANES];
        for slice in &self.slices {
            // SAFETY: `new` stores a slice's `rows × LANES` sources from its `offset` on, so
            // this pointer and row `j < rows` after it are in `sources` (also for the loads
            // below); `degrees` is eight `u32`s (256 bits).
            let rows = unsafe { self.sources.as_ptr().add(slice.offset as usize) };
            // SAFETY: as above.
            let degrees = unsafe { _mm256_loadu_si256(slice.degrees.as_ptr().cast()) };
            let mut sum = _mm512_setzero_pd();
            for j in 0..slice.rows as usize {
                let active = _mm256_cmpgt_epu32_mask(degrees, _mm256_set1_epi32(j as i32));
                // SAFETY: row `j` of the slice is in `sources` (above).
                let at = unsafe { _mm256_loadu_si256(rows.add(j * LANES).cast()) };
                // SAFETY: only active lanes (`j` below the lane's in-degree) gather, and a
                // real source is below `needed <= values.len()` (the caller's `check`).
                let v =
                    unsafe { _mm512_mask_i32gather_pd::<8>(_mm512_setzero_pd(), active, at, base) };
                sum = _mm512_mask_add_pd(sum, active, sum, v);
            }
            // SAFETY: `lanes` is eight `f64`s (512 bits).
            unsafe { _mm512_storeu_pd(lanes.as_mut_ptr(), sum) };
            store_lanes(slice, &lanes, out);
        }
    }

    /// Two halves of four targets per step (AVX2 gathers four `f64`s).
    ///
    /// # Safety
    /// The CPU must have AVX2, and [`check`](Self::check) must hold.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn sum_avx2(&self, values: &[f64], out: &mut [f64]) {
        let base = values.as_ptr();
        let mut lanes = [0.0f64; LANES];
        for slice in &self.slices {
            // SAFETY: `new` stores a slice's `rows × LANES` sources from its `offset` on, so
            // this pointer and row `j < rows` after it are in `sources` (also for the loads
            // below); `degrees` is eight `i64`s, two vectors of 256 bits.
            let rows = unsafe { self.sources.as_ptr().add(slice.offset as usize) };
            let degrees = slice.degrees.map(i64::from);
            // SAFETY: as above.
            let low = unsafe { _mm256_loadu_si256(degrees.as_ptr().cast()) };
            // SAFETY: as above.
            let high = unsafe { _mm256_loadu_si256(degrees[4..].as_ptr().cast()) };
            let (mut sum_low, mut sum_high) = (_mm256_setzero_pd(), _mm256_setzero_pd());
            for j in 0..slice.rows as usize {
                let row = _mm256_set1_epi64x(j as i64);
                let active_low = _mm256_castsi256_pd(_mm256_cmpgt_epi64(low, row));
                let active_high = _mm256_castsi256_pd(_mm256_cmpgt_epi64(high, row));
                // SAFETY: row `j` of the slice (eight `u32`s) is in `sources` (above).
                let (at_low, at_high) = unsafe {
                    (
                        _mm_loadu_si128(rows.add(j * LANES).cast()),
                        _mm_loadu_si128(rows.add(j * LANES + 4).cast()),
                    )
                };
                let zero = _mm256_setzero_pd();
                // SAFETY: only active lanes (`j` below the lane's in-degree) gather, and a
                // real source is below `needed <= values.len()` (the caller's `check`).
                let (v_low, v_high) = unsafe {
                    (
                        _mm256_mask_i32gather_pd::<8>(zero, base, at_low, active_low),
                        _mm256_mask_i32gather_pd::<8>(zero, base, at_high, active_high),
                    )
                };
                // Inactive lanes keep their sums (blended, never added to).
                sum_low = _mm256_blendv_pd(sum_low, _mm256_add_pd(sum_low, v_low), active_low);
                sum_high = _mm256_blendv_pd(sum_high, _mm256_add_pd(sum_high, v_high), active_high);
            }
            // SAFETY: `lanes` is eight `f64`s, two vectors of 256 bits.
            unsafe {
                _mm256_storeu_pd(lanes.as_mut_ptr(), sum_low);
                _mm256_storeu_pd(lanes[4..].as_mut_ptr(), sum_high);
            }
            store_lanes(slice, &lanes, out);
        }
    }
}

/// Writes a slice's lane sums to their targets.
#[inline(always)]
fn store_lanes(slice: &Slice, lanes: &[f64; LANES], out: &mut [f64]) {
    for (&t, &sum) in slice.targets.iter().zip(lanes) {
        if t != NO_TARGET {
            out[t as usize] = sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng64;

    /// The scatter the grouping replaces.
    fn scatter(targets: usize, edges: &[(u32, u32)], values: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; targets];
        for &(s, t) in edges {
            out[t as usize] += values[s as usize];
        }
        out
    }

    /// Every path this CPU has, by name, each giving its sums.
    fn paths(g: &InEdges, values: &[f64]) -> Vec<(&'static str, Vec<f64>)> {
        let run = |f: &dyn Fn(&mut [f64])| {
            let mut out = vec![f64::NAN; g.targets()];
            f(&mut out);
            out
        };
        let mut out = vec![
            ("dispatched", run(&|o| g.sum_into(values, o))),
            ("scalar", run(&|o| g.sum_scalar(values, o))),
        ];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the feature is present and the sizes are the ones `check` asks.
                out.push(("avx2", run(&|o| unsafe { g.sum_avx2(values, o) })));
            }
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                // SAFETY: as above.
                out.push(("avx512", run(&|o| unsafe { g.sum_avx512(values, o) })));
            }
        }
        out
    }

    fn assert_bits(case: &str, got: &[f64], want: &[f64]) {
        assert!(
            got.iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{case}: {got:?} != {want:?}"
        );
    }

    #[test]
    fn sums_are_bit_identical_to_scattering_in_edge_order() {
        let mut rng = Rng64::from_key(&[7]);
        for case in 0..60 {
            let (sources, targets) = (1 + case % 13, 1 + case % 23);
            let edges: Vec<(u32, u32)> = (0..case * 7)
                .map(|_| (rng.below(sources as u32), rng.below(targets as u32)))
                .collect();
            // Values of very different magnitudes and both signs, so that the order of
            // the sums shows.
            let values: Vec<f64> = (0..sources)
                .map(|i| {
                    let sign = if rng.below(2) == 0 { 1.0 } else { -1.0 };
                    sign * f64::from(rng.below(1000)) * 10f64.powi(i as i32 % 9 - 4)
                })
                .collect();
            let g = InEdges::new(targets, &edges);
            assert_eq!((g.targets(), g.len()), (targets, edges.len()));
            assert!(g.stored() >= g.len());
            let want = scatter(targets, &edges, &values);
            for (path, got) in paths(&g, &values) {
                assert_bits(&format!("case {case}, {path}"), &got, &want);
            }
        }
    }

    #[test]
    fn skewed_in_degrees_fill_the_lanes_and_stay_exact() {
        // A few targets with hundreds of sources, most with one to three: the degree order
        // puts the heavy ones together (one slice mixes the last three with light ones).
        let mut rng = Rng64::from_key(&[11]);
        let (sources, targets) = (5_000u32, 1_000u32);
        let mut edges = Vec::new();
        for t in 0..targets {
            let degree = if t % 97 == 0 { 300 + t % 50 } else { 1 + t % 3 };
            for _ in 0..degree {
                edges.push((rng.below(sources), t));
            }
        }
        // Given out of target order, as a file's edges are.
        for i in (1..edges.len()).rev() {
            edges.swap(i, rng.below(i as u32 + 1) as usize);
        }
        let values: Vec<f64> = (0..sources)
            .map(|_| (f64::from(rng.below(1 << 20)) - 524_288.0) * 1e-7)
            .collect();
        let g = InEdges::new(targets as usize, &edges);
        assert!(
            g.stored() < g.len() * 3 / 2,
            "padding: {} stored for {} edges",
            g.stored(),
            g.len()
        );
        let want = scatter(targets as usize, &edges, &values);
        for (path, got) in paths(&g, &values) {
            assert_bits(path, &got, &want);
        }
    }

    #[test]
    #[should_panic(expected = "values for sources")]
    fn too_few_values_are_refused() {
        let g = InEdges::new(2, &[(5, 0)]);
        g.sum_into(&[0.0; 5], &mut [0.0; 2]);
    }

    #[test]
    fn targets_without_edges_sum_to_zero() {
        let g = InEdges::new(3, &[(0, 2), (1, 2)]);
        let mut out = [9.0; 3];
        g.sum_into(&[1.0, 2.0], &mut out);
        assert_eq!(out, [0.0, 0.0, 3.0]);
        assert!(InEdges::new(0, &[]).is_empty());
    }
}
