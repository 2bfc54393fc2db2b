//! PageRank on the store against the textbook power iteration, the limit implementation,
//! and itself across modes, worker counts, shards and staleness.

use iterstore::{Mode, Staleness};
use iterstore_algo::limit::{self, LimitConfig};
use iterstore_algo::pagerank::{reference, PageRankConfig};
use iterstore_apps::pagerank::{run, PageRankParams};
use iterstore_data::{load_edges, power_law_graph, Graph};

use crate::util::{bsp, fixture, max_diff, MODES};

fn fixture_graph() -> Graph {
    load_edges(&fixture("graph30.tsv")).unwrap().graph
}

fn params(block: usize) -> PageRankParams {
    PageRankParams {
        config: PageRankConfig::default(),
        block,
        ..PageRankParams::default()
    }
}

#[test]
fn fixture_graph_equals_the_reference_in_every_mode() {
    let g = fixture_graph();
    assert_eq!(g.num_vertices, 30);
    let want = reference(&g, &PageRankConfig::default(), 40);
    for mode in MODES {
        for workers in [1, 2] {
            let out = run(&bsp(mode, workers, 40), &params(8), &g).unwrap();
            let diff = max_diff(&out.ranks, &want);
            assert!(diff < 1e-9, "{mode:?} × {workers}: {diff}");
            assert_eq!(out.report.iterations.len(), 40);
        }
    }
    let mut cfg = bsp(Mode::Virtual, 2, 40);
    cfg.shards = 3;
    let out = run(&cfg, &params(4), &g).unwrap();
    assert!(max_diff(&out.ranks, &want) < 1e-9);
}

#[test]
fn power_law_graph_equals_the_reference_and_modes_agree_exactly() {
    let g = power_law_graph(3000, 6.0, 11);
    let want = reference(&g, &PageRankConfig::default(), 15);
    for workers in [1, 2] {
        let runs: Vec<_> = MODES
            .iter()
            .map(|&mode| run(&bsp(mode, workers, 15), &params(128), &g).unwrap())
            .collect();
        for out in &runs {
            let diff = max_diff(&out.ranks, &want);
            assert!(diff < 1e-9, "{} × {workers}: {diff}", out.report.mode);
            assert_eq!(out.ranks, runs[0].ranks, "{} vs generic", out.report.mode);
        }
    }
}

#[test]
fn matches_the_limit_implementation_and_its_objective() {
    let g = power_law_graph(1500, 5.0, 3);
    let cfg = PageRankConfig::default();
    for workers in [1, 2, 3] {
        let limit = LimitConfig {
            threads: workers,
            iterations: 12,
        };
        let want = limit::pagerank::run(&cfg, &limit, &g).unwrap();
        let got = run(&bsp(Mode::Virtual, workers, 12), &params(100), &g).unwrap();
        assert!(
            max_diff(&got.ranks, &want.ranks) < 1e-12,
            "{workers} workers"
        );
        for (a, b) in got.report.iterations.iter().zip(&want.stats) {
            assert!((a.objective - b.objective).abs() < 1e-12);
        }
        let sum: f64 = got.ranks.iter().sum();
        assert!((sum - 1.0).abs() < 1e-12);
    }
}

#[test]
fn stale_reads_still_converge_to_pagerank() {
    let g = power_law_graph(2000, 5.0, 5);
    let want = reference(&g, &PageRankConfig::default(), 200);
    let mut cfg = bsp(Mode::Generic, 2, 80);
    cfg.staleness = Staleness::Bounded(2);
    let out = run(&cfg, &params(64), &g).unwrap();
    let diff = max_diff(&out.ranks, &want);
    assert!(diff < 1e-7, "{diff}");
}

#[test]
fn virtual_mode_reports_the_pattern_and_bad_input_is_rejected() {
    let g = fixture_graph();
    let out = run(&bsp(Mode::Virtual, 2, 1), &params(8), &g).unwrap();
    let pattern = out.report.pattern.expect("virtual mode gathers a pattern");
    assert_eq!(pattern.clocks, 1);
    assert!(pattern.rows >= 5, "{pattern:?}"); // 4 blocks + the dangling row
    assert!(run(&bsp(Mode::Generic, 2, 1), &params(8), &g)
        .unwrap()
        .report
        .pattern
        .is_none());
    assert!(run(&bsp(Mode::Generic, 2, 1), &params(0), &g).is_err());
    assert!(run(&bsp(Mode::Generic, 2, 0), &params(8), &g).is_err());
    assert!(run(&bsp(Mode::Generic, 0, 1), &params(8), &g).is_err());
    assert!(run(&bsp(Mode::Generic, 1, 1), &params(8), &Graph::default()).is_err());
}
