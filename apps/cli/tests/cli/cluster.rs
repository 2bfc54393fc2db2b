//! `iterstore run` as a cluster of processes over TCP on loopback (`--processes P`, the
//! launcher): P processes of W workers must write the same bytes as one process of P*W
//! workers under BSP, whatever the layout. The launcher itself: `launcher.rs`; failing and
//! refused peers: `peers.rs`; the harness: `procs.rs`.

use crate::procs::tiny_output;
use crate::util::scratch;

/// Every app in every mode writes the same bytes as P processes of W workers as one
/// process of P x W workers, for `baseline` (the one process's `--workers`) and each of
/// `shapes` (`(processes, workers)`).
fn assert_shapes_write_the_same_bytes(name: &str, baseline: usize, shapes: &[(usize, usize)]) {
    let dir = scratch(name);
    for app in ["mf", "lda", "pagerank", "logreg"] {
        for mode in ["generic", "first-iter", "virtual"] {
            let workers = baseline.to_string();
            let want = tiny_output(
                &dir,
                app,
                mode,
                &format!("{app}-{mode}-1x{baseline}"),
                &["--workers", &workers],
            );
            for &(p, w) in shapes {
                let (p, w) = (p.to_string(), w.to_string());
                let extra = ["--workers", &w, "--processes", &p];
                let got = tiny_output(&dir, app, mode, &format!("{app}-{mode}-{p}x{w}"), &extra);
                assert!(
                    got == want,
                    "{app} --mode {mode}: {p} processes x {w} workers differ from 1 x {baseline}"
                );
            }
        }
    }
}

#[test]
fn processes_write_the_same_bytes_as_threads() {
    assert_shapes_write_the_same_bytes("cluster-same-bytes", 2, &[(2, 1)]);
}

#[test]
fn four_processes_or_two_of_two_write_the_same_bytes_as_four_threads() {
    assert_shapes_write_the_same_bytes("cluster-same-bytes-4", 4, &[(4, 1), (2, 2)]);
}

/// The layouts that give rows an owner (`--partition communities` for PageRank, `strata`
/// for MF) write the same bytes on 4 processes, or 2 of 2 workers, as one process of 4
/// workers, with locality placement on and off.
#[test]
fn owner_layouts_write_the_same_bytes_with_placement_on_and_off() {
    let dir = scratch("cluster-owner-layouts");
    for (app, partition) in [("pagerank", "communities"), ("mf", "strata")] {
        let base = ["--partition", partition, "--workers", "4"];
        let want = tiny_output(&dir, app, "virtual", &format!("{app}-1x4"), &base);
        for placement in ["on", "off"] {
            for (p, w) in [("4", "1"), ("2", "2")] {
                let extra = [
                    "--partition",
                    partition,
                    "--workers",
                    w,
                    "--processes",
                    p,
                    "--row-placement",
                    placement,
                ];
                let name = format!("{app}-{p}x{w}-placement-{placement}");
                let got = tiny_output(&dir, app, "virtual", &name, &extra);
                assert!(
                    got == want,
                    "{app} --partition {partition}: {name} differs from 1 x 4"
                );
            }
        }
    }
}
