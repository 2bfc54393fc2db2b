//! A worker's edges grouped by target, compressed (CSR): the sources of target `t` are
//! `sources[starts[t]..starts[t + 1]]`, in the order the edges were given.
//!
//! PageRank's sweep sums, for every target, a value of each of its sources. Scattering
//! `out[t] += x[s]` edge by edge writes all over `out`; summing per target reads the
//! sources' values (a gather, as a sparse matrix–vector product does) and writes `out`
//! once, in order, with half the bytes per edge (one `u32` instead of a pair). Because a
//! target's sources keep their given order and its sum starts from zero, the result is
//! bit-for-bit the scatter's: grouping changes the memory traffic, not the rounding.

/// Edges grouped by target (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InEdges {
    /// `starts[t]..starts[t + 1]` indexes `sources` for target `t`; `targets + 1` long.
    starts: Vec<u32>,
    /// Every edge's source, grouped by target.
    sources: Vec<u32>,
}

impl InEdges {
    /// Groups `(source, target)` edges by target (`target < targets`), keeping their order
    /// within a target (a stable counting sort).
    ///
    /// # Panics
    /// If a target is out of range or there are `u32::MAX` edges or more.
    pub fn new(targets: usize, edges: &[(u32, u32)]) -> Self {
        assert!(
            edges.len() < u32::MAX as usize,
            "too many edges for u32 offsets"
        );
        let mut starts = vec![0u32; targets + 1];
        for &(_, t) in edges {
            starts[t as usize + 1] += 1;
        }
        for t in 0..targets {
            starts[t + 1] += starts[t];
        }
        let mut next = starts.clone();
        let mut sources = vec![0u32; edges.len()];
        for &(s, t) in edges {
            let at = &mut next[t as usize];
            sources[*at as usize] = s;
            *at += 1;
        }
        Self { starts, sources }
    }

    /// Number of targets.
    pub fn targets(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Number of edges.
    pub fn len(&self) -> usize {
        self.sources.len()
    }

    /// Whether there are no edges.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// `out[t] = Σ values[s]` over target `t`'s sources in their given order, for every
    /// target (0 for a target without edges).
    ///
    /// # Panics
    /// If `out` is not [`targets`](Self::targets) long or a source is outside `values`.
    pub fn sum_into(&self, values: &[f64], out: &mut [f64]) {
        assert_eq!(out.len(), self.targets());
        for (t, o) in out.iter_mut().enumerate() {
            let range = self.starts[t] as usize..self.starts[t + 1] as usize;
            let mut sum = 0.0;
            for &s in &self.sources[range] {
                sum += values[s as usize];
            }
            *o = sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::Rng64;

    /// The scatter the grouping replaces.
    fn scatter(targets: usize, edges: &[(u32, u32)], values: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; targets];
        for &(s, t) in edges {
            out[t as usize] += values[s as usize];
        }
        out
    }

    #[test]
    fn sums_are_bit_identical_to_scattering_in_edge_order() {
        let mut rng = Rng64::from_key(&[7]);
        for case in 0..50 {
            let (sources, targets) = (1 + case % 13, 1 + case % 7);
            let edges: Vec<(u32, u32)> = (0..case * 5)
                .map(|_| (rng.below(sources as u32), rng.below(targets as u32)))
                .collect();
            // Values of very different magnitudes, so that the order of the sums shows.
            let values: Vec<f64> = (0..sources)
                .map(|i| f64::from(rng.below(1000)) * 10f64.powi(i as i32 % 9 - 4))
                .collect();
            let g = InEdges::new(targets, &edges);
            assert_eq!((g.targets(), g.len()), (targets, edges.len()));
            let mut out = vec![f64::NAN; targets];
            g.sum_into(&values, &mut out);
            let want = scatter(targets, &edges, &values);
            assert!(
                out.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "case {case}: {out:?} != {want:?}"
            );
        }
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
