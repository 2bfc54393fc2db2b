//! The limit implementation of PageRank on flat `f64` rank arrays.
//!
//! Worker `w` owns the edges [`partition`]`(E, W, w)`, with targets mapped to dense local
//! rows and the edges grouped by target ([`InEdges`], keeping their order within a target). Each iteration the shares `r(u)/outdeg(u)` and the dangling
//! mass are computed once from the start-of-iteration ranks; every worker sums the shares
//! of its edges into a private accumulator per target; the accumulators are added in worker
//! order (per vertex, in parallel over vertex ranges) and finished into the new ranks with
//! [`finish`]. Buffers live for the whole run; the hot loop does not allocate.
//!
//! It knows nothing of the parameter server; the math is [`crate::algo::pagerank`].

use std::time::Instant;

use super::{add_parts, localize, par_each, par_map, par_rows, IterStats, LimitConfig, Part};
use crate::algo::in_edges::InEdges;
use crate::algo::pagerank::{
    base, check_graph, finish, initial_rank, out_degrees, share, PageRankConfig,
};
use crate::algo::partition;
use crate::data::Graph;

/// The outcome of a limit PageRank run.
#[derive(Debug, Clone)]
pub struct PageRankRun {
    /// The final rank of every vertex.
    pub ranks: Vec<f64>,
    /// Per iteration: time and L1 change of the ranks.
    pub stats: Vec<IterStats>,
}

/// One worker's edges and private accumulator.
struct Worker {
    /// The worker's edges grouped by local target.
    edges: InEdges,
    /// Sorted global ids of the targets.
    targets: Vec<u32>,
    /// This iteration's incoming sum per target.
    sums: Vec<f64>,
}

impl Worker {
    fn new(mine: &[(u32, u32)], n: usize) -> Self {
        let (targets, local) = localize(mine.iter().map(|&(_, v)| v), n);
        let edges: Vec<(u32, u32)> = mine.iter().zip(local).map(|(&(u, _), v)| (u, v)).collect();
        let edges = InEdges::new(targets.len(), &edges);
        Self {
            sums: vec![0.0; targets.len()],
            targets,
            edges,
        }
    }

    fn sweep(&mut self, shares: &[f64]) {
        self.edges.sum_into(shares, &mut self.sums);
    }
}

/// Runs `limit.iterations` BSP power-iteration steps from `1/N` with `limit.threads`
/// workers. Reports `‖r' − r‖₁` after each step.
pub fn run(
    cfg: &PageRankConfig,
    limit: &LimitConfig,
    graph: &Graph,
) -> Result<PageRankRun, String> {
    cfg.validate()?;
    limit.validate()?;
    check_graph(graph)?;
    let (n, threads) = (graph.num_vertices as usize, limit.threads);
    let e = graph.edges.len();
    let degrees = out_degrees(graph);
    let mut workers = par_map(threads, |w| {
        Worker::new(&graph.edges[partition(e, threads, w)], n)
    });
    let mut ranks = vec![initial_rank(n); n];
    let (mut shares, mut next) = (vec![0.0; n], vec![0.0; n]);
    let mut stats = Vec::with_capacity(limit.iterations.min(1024));
    for iter in 0..limit.iterations {
        let start = Instant::now();
        // Shares and dangling mass of the start-of-iteration ranks, per vertex range.
        let dangling: f64 = par_rows(&mut shares, 1, threads, |first, out| {
            let mut dangling = 0.0;
            for (i, s) in out.iter_mut().enumerate() {
                let (r, deg) = (ranks[first + i], degrees[first + i]);
                *s = share(r, deg);
                if deg == 0 {
                    dangling += r;
                }
            }
            dangling
        })
        .iter()
        .sum();
        par_each(&mut workers, |w| w.sweep(&shares));
        let b = base(cfg, n, dangling);
        let parts: Vec<_> = workers
            .iter()
            .map(|w| Part {
                rows: &w.targets,
                data: &w.sums,
                stride: 1,
            })
            .collect();
        let change: f64 = par_rows(&mut next, 1, threads, |first, out| {
            out.fill(0.0);
            add_parts(first, out, 1, &parts);
            let mut change = 0.0;
            for (i, x) in out.iter_mut().enumerate() {
                *x = finish(cfg, b, *x);
                change += (*x - ranks[first + i]).abs();
            }
            change
        })
        .iter()
        .sum();
        std::mem::swap(&mut ranks, &mut next);
        let seconds = start.elapsed().as_secs_f64();
        stats.push(IterStats {
            iter,
            seconds,
            objective: change,
            held_out: None,
        });
    }
    Ok(PageRankRun { ranks, stats })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::pagerank::reference;
    use crate::algo::pagerank::tests::small_graph;

    #[test]
    fn matches_the_reference_for_one_and_more_threads() {
        let (g, cfg) = (small_graph(), PageRankConfig::default());
        for threads in [1, 2, 3, 8] {
            for iterations in [1, 2, 10, 50] {
                let run = run(
                    &cfg,
                    &LimitConfig {
                        threads,
                        iterations,
                    },
                    &g,
                )
                .unwrap();
                let want = reference(&g, &cfg, iterations);
                for (a, b) in run.ranks.iter().zip(&want) {
                    assert!(
                        (a - b).abs() < 1e-12,
                        "threads {threads}, iters {iterations}"
                    );
                }
                assert!((run.ranks.iter().sum::<f64>() - 1.0).abs() < 1e-12);
                assert_eq!(run.stats.len(), iterations);
            }
        }
    }

    #[test]
    fn l1_change_is_the_distance_between_iterations() {
        let (g, cfg) = (small_graph(), PageRankConfig::default());
        let run = run(
            &cfg,
            &LimitConfig {
                threads: 2,
                iterations: 30,
            },
            &g,
        )
        .unwrap();
        for (i, s) in run.stats.iter().enumerate() {
            let (a, b) = (reference(&g, &cfg, i), reference(&g, &cfg, i + 1));
            let want: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).sum();
            assert!((s.objective - want).abs() < 1e-12);
        }
        assert!(run.stats[29].objective < 1e-3 * run.stats[0].objective);
    }

    #[test]
    fn isolated_and_dangling_only_graphs() {
        let g = Graph {
            num_vertices: 4,
            edges: vec![],
        };
        let run = run(
            &PageRankConfig::default(),
            &LimitConfig {
                threads: 3,
                iterations: 3,
            },
            &g,
        )
        .unwrap();
        assert!(run.ranks.iter().all(|&r| (r - 0.25).abs() < 1e-15));
        assert!(super::run(
            &PageRankConfig::default(),
            &LimitConfig::default(),
            &Graph::default()
        )
        .is_err());
    }
}
