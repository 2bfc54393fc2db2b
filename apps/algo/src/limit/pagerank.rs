//! The limit implementation of PageRank on flat `f64` rank arrays.
//!
//! Worker `w` owns the edges [`partition`]`(E, W, w)`, with targets mapped to dense local
//! rows and the edges grouped by target ([`InEdges`], keeping their order within a target). Each iteration the shares `r(u)/outdeg(u)` and the dangling
//! mass are computed once from the start-of-iteration ranks; every worker sums the shares
//! of its edges into a private accumulator per target; the accumulators are added in worker
//! order (per vertex, in parallel over vertex ranges) and finished into the new ranks with
//! [`finish`]. The threads and buffers live for the whole run (the steps meet at a
//! `SpinBarrier`); the hot loop does not allocate.
//!
//! It knows nothing of the parameter server; the math is [`crate::pagerank`].

use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Instant;

use super::{
    add_parts, localize, lock, par_map, read, rows_per_range, write, IterStats, LimitConfig, Part,
    SpinBarrier,
};
use crate::in_edges::InEdges;
use crate::pagerank::{
    base, check_graph, finish, initial_rank, out_degrees, share, PageRankConfig,
};
use crate::partition;
use iterstore_data::Graph;

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
///
/// The threads start once and meet at a `SpinBarrier` between an iteration's steps
/// (an iteration on a real graph takes a few hundred microseconds, about what starting
/// threads for each step cost): worker `w` computes the shares and dangling mass of its
/// vertex range, sums its edges' shares, then finishes its range of the new ranks from
/// every worker's sums (in worker order) and writes them back.
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
    let workers: Vec<RwLock<Worker>> = par_map(threads, |w| {
        Worker::new(&graph.edges[partition(e, threads, w)], n)
    })
    .into_iter()
    .map(RwLock::new)
    .collect();
    // Vertex ranges as `par_rows` cuts them (the partial sums add up in range order).
    let per = rows_per_range(n, threads);
    let range = |w: usize| (w * per).min(n)..((w + 1) * per).min(n);
    let ranks = RwLock::new(vec![initial_rank(n); n]);
    let shares = RwLock::new(vec![0.0; n]);
    let dangling: Vec<Mutex<f64>> = (0..threads).map(|_| Mutex::new(0.0)).collect();
    let change: Vec<Mutex<f64>> = (0..threads).map(|_| Mutex::new(0.0)).collect();
    let stats = Mutex::new(Vec::with_capacity(limit.iterations.min(1024)));
    let barrier = SpinBarrier::new(threads);
    let iterate = |w: usize| {
        let _poison = barrier.guard();
        let mine = range(w);
        let mut buf = vec![0.0; mine.len()];
        for iter in 0..limit.iterations {
            let start = Instant::now();
            // Shares and dangling mass of the start-of-iteration ranks of my range.
            let mut mass = 0.0;
            {
                let ranks = read(&ranks);
                for (i, s) in buf.iter_mut().enumerate() {
                    let (r, deg) = (ranks[mine.start + i], degrees[mine.start + i]);
                    *s = share(r, deg);
                    if deg == 0 {
                        mass += r;
                    }
                }
            }
            write(&shares)[mine.clone()].copy_from_slice(&buf);
            *lock(&dangling[w]) = mass;
            barrier.wait();
            write(&workers[w]).sweep(&read(&shares));
            barrier.wait();
            // My range of the new ranks, from every worker's sums in worker order.
            let b = base(cfg, n, dangling.iter().map(|d| *lock(d)).sum());
            let mut moved = 0.0;
            {
                let all: Vec<_> = workers.iter().map(read).collect();
                let parts: Vec<_> = all
                    .iter()
                    .map(|w| Part {
                        rows: &w.targets,
                        data: &w.sums,
                        stride: 1,
                    })
                    .collect();
                buf.fill(0.0);
                add_parts(mine.start, &mut buf, 1, &parts);
                let ranks = read(&ranks);
                for (i, x) in buf.iter_mut().enumerate() {
                    *x = finish(cfg, b, *x);
                    moved += (*x - ranks[mine.start + i]).abs();
                }
            }
            *lock(&change[w]) = moved;
            barrier.wait();
            write(&ranks)[mine.clone()].copy_from_slice(&buf);
            barrier.wait();
            if w == 0 {
                // The others wait for this thread at the next iteration's first barrier.
                lock(&stats).push(IterStats {
                    iter,
                    seconds: start.elapsed().as_secs_f64(),
                    objective: change.iter().map(|c| *lock(c)).sum(),
                    held_out: None,
                });
            }
        }
    };
    par_map(threads, iterate);
    Ok(PageRankRun {
        ranks: ranks.into_inner().unwrap_or_else(PoisonError::into_inner),
        stats: stats.into_inner().unwrap_or_else(PoisonError::into_inner),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagerank::reference;
    use crate::pagerank::tests::small_graph;

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
