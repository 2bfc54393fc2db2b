//! `Cluster::set_rows` (issue 46): rows given values between runs are what the next run
//! reads, in every mode, through the specialized paths (per-thread copies of contended
//! rows and the arena included), bit-identically over TCP and in one process; misuse is
//! refused before anything is sent, and processes that call different collectives both
//! fail within seconds.

use crate::util::{over_tcp, over_tcp_results, within};
use iterstore::stats::Stats;
use iterstore::{Cluster, Config, Error, Mode, Staleness, Worker};
use std::time::{Duration, Instant};

const ROWS: u64 = 6;
const WIDTH: usize = 3;

/// What every worker reads at each clock of a run, in order.
type Seen = Vec<Vec<f64>>;

/// What [`program`] returns: per worker and run what it read, the final rows, the stats.
type Outcome = (Vec<Seen>, Vec<(u64, Vec<f64>)>, Stats);

/// Three clocks: read every row (each read by every worker: contended), then add the
/// worker's id + 1 to every row.
fn body(w: &mut Worker<'_>, t: &iterstore::Table<f64>) -> iterstore::Result<Seen> {
    let mut seen = Vec::new();
    for _ in 0..3 {
        let mut all = vec![0.0; ROWS as usize * WIDTH];
        for (r, row) in all.chunks_exact_mut(WIDTH).enumerate() {
            w.read(t, r as u64, row)?;
        }
        seen.push(all);
        let d = [(w.id() + 1) as f64; WIDTH];
        for r in 0..ROWS {
            w.update(t, r, &d)?;
        }
        w.clock()?;
    }
    Ok(seen)
}

/// The rows process `rank` of `processes` sets the `round`-th time: those `row %
/// processes == rank`, the first time all of them, later only row 1 and 4.
fn rows_to_set(rank: usize, processes: usize, round: u32) -> Vec<(u64, Vec<f64>)> {
    (0..ROWS)
        .filter(|r| *r as usize % processes == rank)
        .filter(|r| round == 0 || *r == 1 || *r == 4)
        .map(|r| {
            let base = f64::from(round) * 100.0 + r as f64;
            (r, vec![base, -0.0, base + 0.25])
        })
        .collect()
}

/// Sets, runs, sets again, runs: what the workers read in both runs, the final rows,
/// and the stats.
fn program(cluster: &mut Cluster) -> iterstore::Result<Outcome> {
    let t = cluster.create_table_sized::<f64>("t", WIDTH, ROWS)?;
    let (rank, processes) = (cluster.rank(), cluster.processes());
    if cluster.config().mode == Mode::Virtual {
        cluster.virtual_iteration(|w| body(w, &t))?;
    }
    cluster.set_rows(&t, &rows_to_set(rank, processes, 0))?;
    let mut seen = cluster.run(|w| body(w, &t))?;
    cluster.set_rows(&t, &rows_to_set(rank, processes, 1))?;
    seen.extend(cluster.run(|w| body(w, &t))?);
    Ok((seen, cluster.snapshot(&t)?, cluster.stats()))
}

fn one_process(mode: Mode, staleness: Staleness) -> Outcome {
    let config = Config::new(4).with_mode(mode).with_staleness(staleness);
    let mut c = Cluster::start(config).unwrap();
    let out = program(&mut c).unwrap();
    c.shutdown().unwrap();
    out
}

#[test]
fn the_next_run_reads_the_rows_set_in_every_mode() {
    within(120, || {
        // After the first set each row holds its values; three clocks add 1+2+3+4 per
        // element; the second set replaces rows 1 and 4.
        let first = |r: u64| vec![r as f64, 0.0, r as f64 + 0.25];
        let after_run = |r: u64| first(r).iter().map(|v| v + 30.0).collect::<Vec<_>>();
        let second = |r: u64| match r {
            1 | 4 => vec![100.0 + r as f64, 0.0, 100.25 + r as f64],
            _ => after_run(r),
        };
        let flat = |f: &dyn Fn(u64) -> Vec<f64>| (0..ROWS).flat_map(f).collect::<Vec<_>>();
        let (want_first, want_second) = (flat(&first), flat(&second));
        let mut reference = None;
        for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
            let (seen, rows, stats) = one_process(mode, Staleness::BSP);
            assert_eq!(seen.len(), 8, "{mode:?}");
            for (w, s) in seen.iter().enumerate() {
                let want = if w < 4 { &want_first } else { &want_second };
                assert_eq!(
                    &s[0],
                    want,
                    "{mode:?}: worker {} of run {}",
                    w % 4,
                    w / 4 + 1
                );
                assert!(s[0].iter().all(|v| v.to_bits() != (-0.0f64).to_bits()));
            }
            let want_rows: Vec<(u64, Vec<f64>)> = (0..ROWS)
                .map(|r| (r, second(r).iter().map(|v| v + 30.0).collect()))
                .collect();
            assert_eq!(rows, want_rows, "{mode:?}");
            if mode == Mode::Virtual {
                assert_eq!(stats.indexed_accesses, 0, "off the tape after a set");
                assert!(stats.tape_accesses > 0, "not specialized");
            }
            // Every mode reads bit for bit the same at every clock.
            match &reference {
                None => reference = Some(seen),
                Some(r) => assert_eq!(r, &seen, "{mode:?} differs from generic"),
            }
        }
    });
}

#[test]
fn under_ssp_the_first_read_after_a_set_is_the_value_set() {
    within(120, || {
        for mode in [Mode::Generic, Mode::Virtual] {
            let (seen, _, _) = one_process(mode, Staleness::Bounded(2));
            for s in &seen[4..] {
                assert_eq!(s[0][WIDTH..2 * WIDTH], [101.0, 0.0, 101.25], "{mode:?}");
            }
        }
    });
}

#[test]
fn two_processes_over_tcp_equal_one_process_of_as_many_workers() {
    within(180, || {
        for mode in [Mode::Generic, Mode::Virtual] {
            let (seen, rows, _) = one_process(mode, Staleness::BSP);
            let config = Config::new(2).with_mode(mode);
            let parts = over_tcp(config, 2, |c| program(c).map(|(s, r, _)| (s, r)));
            // Runs' results come in worker order per process: interleave them back.
            for (run, want) in seen.chunks(4).enumerate() {
                let got: Vec<&Seen> = parts
                    .iter()
                    .flat_map(|(s, _)| &s[run * 2..run * 2 + 2])
                    .collect();
                assert_eq!(got, want.iter().collect::<Vec<_>>(), "{mode:?}: run {run}");
            }
            for (_, r) in &parts {
                assert_eq!(r, &rows, "{mode:?}");
            }
        }
    });
}

#[test]
fn misuse_is_refused_before_anything_is_sent() {
    within(30, || {
        let mut c = Cluster::start(Config::new(1)).unwrap();
        let t = c.create_table_sized::<f32>("t", 2, 4).unwrap();
        let twice = c.set_rows(&t, &[(1, vec![1.0; 2]), (1, vec![2.0; 2])]);
        assert!(
            twice
                .unwrap_err()
                .to_string()
                .contains("row 1 of table 't' is given twice"),
            "twice"
        );
        let far = c.set_rows(&t, &[(4, vec![1.0; 2])]).unwrap_err();
        assert!(
            matches!(
                far,
                Error::RowOutOfRange {
                    row: 4,
                    rows: 4,
                    ..
                }
            ),
            "{far}"
        );
        let wide = c.set_rows(&t, &[(0, vec![1.0; 3])]).unwrap_err();
        assert!(matches!(
            wide,
            Error::WidthMismatch {
                expected: 2,
                actual: 3,
                ..
            }
        ));
        // Nothing was set, and the cluster still works.
        c.set_rows(&t, &[]).unwrap();
        assert!(c.snapshot(&t).unwrap().is_empty());
        c.shutdown().unwrap();
    });
}

/// Both processes' errors, and how long they took to come.
fn both_fail(
    body: impl Fn(&mut Cluster) -> iterstore::Result<()> + Sync + Send + 'static,
) -> Vec<String> {
    let started = Instant::now();
    let results = within(60, move || over_tcp_results(Config::new(1), 2, body));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| match r {
            Ok(()) => panic!("rank {rank} succeeded"),
            Err(e) => e.to_string(),
        })
        .collect()
}

#[test]
fn a_row_set_by_two_processes_fails_both() {
    let errors = both_fail(|c| {
        let t = c.create_table::<i64>("t", 1)?;
        c.set_rows(&t, &[(7, vec![c.rank() as i64])])
    });
    for e in &errors {
        assert!(
            e.contains("row 7 of table 't' set by process") && e.contains("timing"),
            "{e}"
        );
    }
}

#[test]
fn a_process_that_runs_while_the_other_sets_rows_fails_both() {
    let errors = both_fail(|c| {
        let t = c.create_table::<i64>("t", 1)?;
        c.run(|w| w.clock())?;
        if c.rank() == 0 {
            c.set_rows(&t, &[(0, vec![5])])?;
        }
        c.run(|w| {
            w.update(&t, 0, &[1])?;
            w.clock()
        })?;
        Ok(())
    });
    for e in &errors {
        assert!(
            e.contains("sets rows") && e.contains("different collectives"),
            "{e}"
        );
    }
}

#[test]
fn a_process_that_gathers_while_the_other_sets_rows_fails_both() {
    let errors = both_fail(|c| {
        let t = c.create_table::<i64>("t", 1)?;
        if c.rank() == 0 {
            c.set_rows(&t, &[(0, vec![5])])?;
        } else {
            c.all_gather(&[1i64])?;
        }
        Ok(())
    });
    for e in &errors {
        assert!(e.contains("different collectives"), "{e}");
    }
}
