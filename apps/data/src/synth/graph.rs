//! Synthetic directed graphs with power-law degrees and dangling vertices (PageRank
//! input).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::sampling::{zipf_weights, AliasTable};
use super::size_index;
use crate::Graph;

/// Fraction of vertices with no out-edges.
const DANGLING_FRACTION: f64 = 0.1;
/// Tail exponent of the out-degree distribution, `P(d) ∝ d^-γ`.
const OUT_DEGREE_GAMMA: f64 = 2.2;
/// Zipf exponent of in-degree weights; the in-degree tail exponent is `1 + 1/β ≈ 2.25`.
const IN_WEIGHT_BETA: f64 = 0.8;

/// Parameters of [`power_law_graph`].
#[derive(Debug, Clone, PartialEq)]
pub struct GraphSpec {
    /// Number of vertices.
    pub num_vertices: u32,
    /// Mean out-degree over all vertices, dangling ones included.
    pub avg_out_degree: f64,
    /// Random seed.
    pub seed: u64,
}

impl GraphSpec {
    /// The preset for `size` (one of [`super::SIZES`]), with seed 0:
    ///
    /// | size   | vertices  | mean out-degree | ≈ edges |
    /// |--------|-----------|-----------------|---------|
    /// | tiny   | 1 000     | 8               | 8 K     |
    /// | small  | 10 000    | 10              | 100 K   |
    /// | medium | 100 000   | 10              | 1 M     |
    /// | large  | 1 000 000 | 10              | 10 M    |
    /// | xlarge | 4 000 000 | 12              | 48 M    |
    pub fn preset(size: &str) -> Result<GraphSpec, String> {
        let (num_vertices, avg_out_degree) = match size_index(size)? {
            0 => (1_000, 8.0),
            1 => (10_000, 10.0),
            2 => (100_000, 10.0),
            3 => (1_000_000, 10.0),
            _ => (4_000_000, 12.0),
        };
        Ok(GraphSpec {
            num_vertices,
            avg_out_degree,
            seed: 0,
        })
    }

    /// Checks that the spec describes a non-empty, well-defined graph.
    pub fn validate(&self) -> Result<(), String> {
        if self.num_vertices < 2 {
            return Err("num_vertices must be at least 2".into());
        }
        let max = f64::from(self.num_vertices - 1) * (1.0 - DANGLING_FRACTION) / 2.0;
        if !(self.avg_out_degree > 0.0 && self.avg_out_degree <= max) {
            return Err(format!(
                "avg_out_degree {} must be in (0, {max}] for {} vertices",
                self.avg_out_degree, self.num_vertices
            ));
        }
        Ok(())
    }

    /// Generates the graph; see [`power_law_graph`].
    pub fn generate(&self) -> Graph {
        power_law_graph(self.num_vertices, self.avg_out_degree, self.seed)
    }
}

/// A directed Chung–Lu-style graph with power-law out- and in-degrees.
///
/// A random 10% of vertices are dangling (no out-edges). The others get Pareto
/// (`γ = 2.2`) out-degree weights scaled so the mean out-degree over all vertices is
/// `avg_out_degree`, rounded stochastically and capped at `num_vertices - 1`. Each
/// vertex's targets are distinct, exclude itself, and are drawn with probability
/// proportional to a Zipf in-weight (exponent 0.8) over a random permutation of the
/// vertices, independent of out-degree. Edges are grouped by source. Fewer than two
/// vertices or a non-positive degree give an edgeless graph; see [`GraphSpec::validate`].
pub fn power_law_graph(num_vertices: u32, avg_out_degree: f64, seed: u64) -> Graph {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = num_vertices as usize;
    let mut graph = Graph {
        num_vertices,
        edges: Vec::new(),
    };
    if n < 2 || !(avg_out_degree.is_finite() && avg_out_degree > 0.0) {
        return graph;
    }
    let out_degrees = out_degrees(&mut rng, n, avg_out_degree);
    let mut by_in_weight: Vec<u32> = (0..num_vertices).collect();
    by_in_weight.shuffle(&mut rng);
    let in_weights = AliasTable::new(&zipf_weights(n, IN_WEIGHT_BETA));

    let total: usize = out_degrees.iter().sum();
    graph.edges.reserve(total);
    // `last_source[t] == s` marks t as already a target of s.
    let mut last_source = vec![u32::MAX; n];
    for (src, &want) in (0..num_vertices).zip(&out_degrees) {
        last_source[src as usize] = src; // no self-loops
        let mut got = 0;
        let mut attempts = 0;
        while got < want && attempts < 8 * want + 100 {
            attempts += 1;
            let dst = by_in_weight[in_weights.sample(&mut rng)];
            if last_source[dst as usize] == src {
                continue;
            }
            last_source[dst as usize] = src;
            graph.edges.push((src, dst));
            got += 1;
        }
    }
    graph
}

/// Out-degrees: 0 for a random `DANGLING_FRACTION` of vertices, Pareto-distributed for
/// the rest, scaled to mean `avg` over all `n` vertices and capped at `n - 1`.
fn out_degrees(rng: &mut StdRng, n: usize, avg: f64) -> Vec<usize> {
    let tail = 1.0 / (OUT_DEGREE_GAMMA - 1.0);
    let weights: Vec<f64> = (0..n)
        .map(|_| {
            if rng.gen_bool(DANGLING_FRACTION) {
                0.0
            } else {
                // Pareto with minimum 1; `1 - u` lies in (0, 1].
                (1.0 - rng.gen::<f64>()).powf(-tail)
            }
        })
        .collect();
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 {
        return vec![0; n];
    }
    let scale = avg * n as f64 / sum;
    let cap = (n - 1) as f64;
    weights
        .iter()
        .map(|&w| {
            let x = (w * scale).min(cap);
            let floor = x.floor();
            let up = rng.gen::<f64>() < x - floor;
            floor as usize + usize::from(up)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn degrees(g: &Graph) -> (Vec<u32>, Vec<u32>) {
        let mut out = vec![0u32; g.num_vertices as usize];
        let mut inn = vec![0u32; g.num_vertices as usize];
        for &(s, t) in &g.edges {
            out[s as usize] += 1;
            inn[t as usize] += 1;
        }
        (out, inn)
    }

    #[test]
    fn deterministic_for_a_seed() {
        let spec = GraphSpec::preset("tiny").unwrap();
        assert_eq!(spec.generate(), spec.generate());
        let other = GraphSpec {
            seed: 2,
            ..spec.clone()
        };
        assert_ne!(spec.generate(), other.generate());
    }

    #[test]
    fn shape_skew_and_dangling() {
        let spec = GraphSpec::preset("small").unwrap();
        let g = spec.generate();
        assert_eq!(g.num_vertices, 10_000);
        let mean = g.edges.len() as f64 / f64::from(g.num_vertices);
        assert!(
            (mean / spec.avg_out_degree - 1.0).abs() < 0.15,
            "mean out-degree {mean}"
        );

        let (out, inn) = degrees(&g);
        let dangling = out.iter().filter(|&&d| d == 0).count() as f64 / out.len() as f64;
        assert!(
            (0.05..0.3).contains(&dangling),
            "dangling fraction {dangling}"
        );
        let max_out = f64::from(*out.iter().max().unwrap());
        let max_in = f64::from(*inn.iter().max().unwrap());
        assert!(
            max_out > 10.0 * mean,
            "max out-degree {max_out}, mean {mean}"
        );
        assert!(max_in > 10.0 * mean, "max in-degree {max_in}, mean {mean}");
    }

    #[test]
    fn no_self_loops_or_duplicates() {
        let g = GraphSpec::preset("tiny").unwrap().generate();
        let mut edges = g.edges.clone();
        assert!(edges.iter().all(|&(s, t)| s != t && t < g.num_vertices));
        edges.sort_unstable();
        edges.dedup();
        assert_eq!(edges.len(), g.edges.len());
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        assert!(power_law_graph(0, 5.0, 0).edges.is_empty());
        assert!(power_law_graph(1, 5.0, 0).edges.is_empty());
        assert!(power_law_graph(10, f64::NAN, 0).edges.is_empty());
        let dense = power_law_graph(5, 100.0, 0);
        assert!(dense.edges.len() <= 20);
        assert!(GraphSpec {
            num_vertices: 1,
            avg_out_degree: 1.0,
            seed: 0
        }
        .validate()
        .is_err());
    }
}
