//! PageRank by power iteration: the kernel.
//!
//! With `N` vertices, damping `d`, out-degrees `outdeg`, and `D = Σ_{outdeg(u)=0} r(u)` the
//! rank held by dangling vertices, one step maps `r` to
//!
//! ```text
//! r'(v) = (1 − d)/N + d · (Σ_{u→v} r(u)/outdeg(u) + D/N)
//! ```
//!
//! starting from `r = 1/N`: dangling vertices spread their rank uniformly, as networkx's
//! `pagerank` does by default, so the ranks keep summing to 1. Parallel edges count with
//! their multiplicity. A data-parallel implementation splits the edges; each worker adds
//! [`share`]`(r(u), outdeg(u))` of its edges `u→v` into an accumulator for `v`, and the
//! accumulated sums are finished with [`finish`] and [`base`].
//!
//! This module does not know how edges are partitioned or where ranks live; [`reference()`]
//! is an independent, deliberately naive implementation used as the test oracle.

use iterstore_data::Graph;

/// Parameters of PageRank.
#[derive(Debug, Clone, PartialEq)]
pub struct PageRankConfig {
    /// Probability `d` of following an edge rather than teleporting.
    pub damping: f64,
}

impl Default for PageRankConfig {
    fn default() -> Self {
        Self { damping: 0.85 }
    }
}

impl PageRankConfig {
    /// Checks that the damping factor is in `[0, 1]`.
    pub fn validate(&self) -> Result<(), String> {
        if (0.0..=1.0).contains(&self.damping) {
            Ok(())
        } else {
            Err(format!(
                "pagerank: damping {} must be in [0, 1]",
                self.damping
            ))
        }
    }
}

/// Checks that the graph has a vertex and that every edge's endpoints are vertices.
pub fn check_graph(graph: &Graph) -> Result<(), String> {
    if graph.num_vertices == 0 {
        return Err("pagerank: graph has no vertices".into());
    }
    let n = graph.num_vertices;
    match graph.edges.iter().position(|&(u, v)| u >= n || v >= n) {
        Some(i) => Err(format!(
            "pagerank: edge {i} {:?} has an endpoint >= {n}",
            graph.edges[i]
        )),
        None => Ok(()),
    }
}

/// Out-degree of every vertex (parallel edges counted with multiplicity).
pub fn out_degrees(graph: &Graph) -> Vec<u32> {
    let mut deg = vec![0u32; graph.num_vertices as usize];
    for &(u, _) in &graph.edges {
        deg[u as usize] += 1;
    }
    deg
}

/// The initial rank of every vertex, `1/N`.
pub fn initial_rank(num_vertices: usize) -> f64 {
    1.0 / num_vertices as f64
}

/// What vertex `u` sends along each out-edge: `r(u)/outdeg(u)` (0 for a dangling vertex).
#[inline]
pub fn share(rank: f64, out_degree: u32) -> f64 {
    if out_degree == 0 {
        0.0
    } else {
        rank / f64::from(out_degree)
    }
}

/// Delta propagation's step for every slot `s` whose current rank is `ranks[s]`: what
/// the slot propagates now is `d·share(r, deg)` for a source (`degrees[s]`, as `f64`, not
/// 0) and `r` itself for a dangling vertex (`degrees[s] == 0`); `change[s]` becomes that
/// minus `last[s]`, and `last[s]` that. Branch-free and compiled for the CPU's widest
/// vectors (chosen at run time); each slot's arithmetic is the scalar one, so the results
/// do not depend on the CPU.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx2+fma",
    "x86_64+avx2+fma",
))]
pub fn propagate(
    damping: f64,
    ranks: &[f64],
    degrees: &[f64],
    last: &mut [f64],
    change: &mut [f64],
) {
    let n = ranks.len();
    let (degrees, last, change) = (&degrees[..n], &mut last[..n], &mut change[..n]);
    for s in 0..n {
        let (r, deg) = (ranks[s], degrees[s]);
        let new = if deg == 0.0 { r } else { damping * (r / deg) };
        change[s] = new - last[s];
        last[s] = new;
    }
}

/// `D`: the total rank of the dangling vertices (summed in vertex order).
pub fn dangling_mass(ranks: &[f64], out_degrees: &[u32]) -> f64 {
    ranks
        .iter()
        .zip(out_degrees)
        .filter(|&(_, &deg)| deg == 0)
        .map(|(r, _)| r)
        .sum()
}

/// The part of `r'(v)` common to every vertex: `(1 − d)/N + d·D/N`.
pub fn base(cfg: &PageRankConfig, num_vertices: usize, dangling: f64) -> f64 {
    let n = num_vertices as f64;
    (1.0 - cfg.damping) / n + cfg.damping * dangling / n
}

/// `r'(v) = base + d · incoming`, where `incoming = Σ_{u→v} share(r(u), outdeg(u))`.
#[inline]
pub fn finish(cfg: &PageRankConfig, base: f64, incoming: f64) -> f64 {
    base + cfg.damping * incoming
}

/// `‖a − b‖₁`.
pub fn l1_change(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum()
}

/// One sequential power-iteration step from `ranks` into `next`, built from the kernel
/// functions above (edges summed in order).
pub fn step(
    cfg: &PageRankConfig,
    edges: &[(u32, u32)],
    out_degrees: &[u32],
    ranks: &[f64],
    next: &mut [f64],
) {
    next.fill(0.0);
    for &(u, v) in edges {
        next[v as usize] += share(ranks[u as usize], out_degrees[u as usize]);
    }
    let b = base(cfg, ranks.len(), dangling_mass(ranks, out_degrees));
    for x in next.iter_mut() {
        *x = finish(cfg, b, *x);
    }
}

/// The ranks after `iters` steps from `1/N`, computed as plainly as possible and
/// independently of the kernel functions: the test oracle.
///
/// # Panics
/// If `cfg` or `graph` is invalid.
pub fn reference(graph: &Graph, cfg: &PageRankConfig, iters: usize) -> Vec<f64> {
    cfg.validate().unwrap();
    check_graph(graph).unwrap();
    let n = graph.num_vertices as usize;
    let d = cfg.damping;
    let mut outdeg = vec![0usize; n];
    for &(u, _) in &graph.edges {
        outdeg[u as usize] += 1;
    }
    let mut r = vec![1.0 / n as f64; n];
    for _ in 0..iters {
        let mut dangling = 0.0;
        for v in 0..n {
            if outdeg[v] == 0 {
                dangling += r[v];
            }
        }
        let mut next = vec![(1.0 - d) / n as f64 + d * dangling / n as f64; n];
        for &(u, v) in &graph.edges {
            next[v as usize] += d * r[u as usize] / outdeg[u as usize] as f64;
        }
        r = next;
    }
    r
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// 0→1, 0→2, 1→2, 2→0, 3→2, 3→4, 3→2 (parallel); 4 is dangling, 3 has no in-edges.
    pub(crate) fn small_graph() -> Graph {
        Graph {
            num_vertices: 5,
            edges: vec![(0, 1), (0, 2), (1, 2), (2, 0), (3, 2), (3, 4), (3, 2)],
        }
    }

    #[test]
    fn propagation_is_the_scalar_step_bit_for_bit() {
        let mut rng = crate::Rng64::from_key(&[3]);
        for n in [0, 1, 7, 8, 9, 100] {
            let ranks: Vec<f64> = (0..n).map(|_| rng.next_f64() * 1e-3).collect();
            // Every fourth slot dangling.
            let degrees: Vec<f64> = (0..n)
                .map(|i| {
                    if i % 4 == 0 {
                        0.0
                    } else {
                        f64::from(1 + rng.below(50))
                    }
                })
                .collect();
            let before: Vec<f64> = (0..n).map(|_| rng.next_f64() * 1e-3).collect();
            let (mut last, mut change) = (before.clone(), vec![f64::NAN; n]);
            propagate(0.85, &ranks, &degrees, &mut last, &mut change);
            for s in 0..n {
                let new = if degrees[s] == 0.0 {
                    ranks[s]
                } else {
                    0.85 * share(ranks[s], degrees[s] as u32)
                };
                assert_eq!(last[s].to_bits(), new.to_bits(), "slot {s} of {n}");
                assert_eq!(change[s].to_bits(), (new - before[s]).to_bits());
            }
        }
    }

    #[test]
    fn step_matches_reference_and_keeps_mass() {
        let (g, cfg) = (small_graph(), PageRankConfig::default());
        let deg = out_degrees(&g);
        assert_eq!(deg, [2, 1, 1, 3, 0]);
        let mut r = vec![initial_rank(5); 5];
        let mut next = vec![0.0; 5];
        for it in 1..=20 {
            step(&cfg, &g.edges, &deg, &r, &mut next);
            std::mem::swap(&mut r, &mut next);
            let want = reference(&g, &cfg, it);
            assert!(l1_change(&r, &want) < 1e-12, "iteration {it}");
            assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn reference_converges_to_networkx() {
        // networkx 3.6.1, pure-Python path: with G = nx.MultiDiGraph() holding vertices
        // 0..5 and the edges of small_graph() (a multigraph keeps the parallel edge 3→2),
        // networkx.algorithms.link_analysis.pagerank_alg._pagerank_python(G, tol=1e-15).
        let want = [
            0.353_322_016_263_657_6,
            0.188_533_206_304_508_18,
            0.370_530_196_319_064_75,
            0.038_371_349_392_453_645,
            0.049_243_231_720_315_514,
        ];
        let got = reference(&small_graph(), &PageRankConfig::default(), 200);
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-9, "{got:?}");
        }
    }

    #[test]
    fn bad_input_is_rejected() {
        assert!(check_graph(&Graph::default()).is_err());
        let g = Graph {
            num_vertices: 2,
            edges: vec![(0, 2)],
        };
        assert!(check_graph(&g).unwrap_err().contains("edge 0"));
        assert!(PageRankConfig { damping: 1.5 }.validate().is_err());
    }
}
