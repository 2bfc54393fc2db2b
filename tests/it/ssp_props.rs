//! Property tests of the consistency model: W workers run random READ/UPDATE/CLOCK
//! programs; every read is checked against the SSP definition and the final tables against
//! a sequential oracle.
//!
//! Instrumentation: table `counters` has one column per (worker, clock); an update by
//! worker `w` during clock `k` adds its amount to column `w * MAX_CLOCKS + k`. So a read
//! shows exactly which clocks of which workers it includes.

use crate::util::within;
use iterstore::{Cluster, Config, Mode, Staleness};
use proptest::prelude::*;

const MAX_CLOCKS: usize = 5;
const ROWS: u64 = 4;

#[derive(Debug, Clone)]
enum Op {
    Read(u64),
    Update(u64, i64),
}

/// `programs[w][k]` = the ops worker `w` runs during clock `k`.
type Programs = Vec<Vec<Vec<Op>>>;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..ROWS).prop_map(Op::Read),
        ((0..ROWS), 1i64..5).prop_map(|(r, a)| Op::Update(r, a)),
    ]
}

fn programs() -> impl Strategy<Value = Programs> {
    (1usize..=3).prop_flat_map(|workers| {
        prop::collection::vec(
            prop::collection::vec(prop::collection::vec(op(), 0..6), 1..=MAX_CLOCKS),
            workers,
        )
    })
}

/// `totals[w][k][r]`: what worker `w` adds to row `r` during clock `k`.
fn totals(programs: &Programs) -> Vec<Vec<Vec<i64>>> {
    programs
        .iter()
        .map(|clocks| {
            let mut t = vec![vec![0i64; ROWS as usize]; MAX_CLOCKS];
            for (k, ops) in clocks.iter().enumerate() {
                for op in ops {
                    if let Op::Update(r, a) = op {
                        t[k][*r as usize] += a;
                    }
                }
            }
            t
        })
        .collect()
}

/// Checks one read by worker `w` at clock `c` of row `r` (value `v`); `own` is what `w`
/// has added to `r` so far during clock `c`. Returns a description of any violation.
fn check_read(
    staleness: Staleness,
    t: &[Vec<Vec<i64>>],
    w: usize,
    c: usize,
    r: usize,
    own: i64,
    v: &[i64],
) -> Result<(), String> {
    let col = |w2: usize, k: usize| v[w2 * MAX_CLOCKS + k];
    // Read-my-writes: all of my earlier clocks, and my current clock so far.
    for (k, mine) in t[w].iter().enumerate() {
        let want = match k.cmp(&c) {
            std::cmp::Ordering::Less => mine[r],
            std::cmp::Ordering::Equal => own,
            std::cmp::Ordering::Greater => 0,
        };
        if col(w, k) != want {
            return Err(format!("own clock {k}: saw {}, want {want}", col(w, k)));
        }
    }
    // The others: an exact snapshot at some data clock d with c - s <= d <= c.
    let lowest = match staleness {
        Staleness::Bounded(s) => c.saturating_sub(s as usize),
        Staleness::Unbounded => 0,
    };
    let consistent_with = |d: usize| {
        (0..t.len())
            .filter(|&w2| w2 != w)
            .all(|w2| (0..MAX_CLOCKS).all(|k| col(w2, k) == if k < d { t[w2][k][r] } else { 0 }))
    };
    if (lowest..=c).any(consistent_with) {
        Ok(())
    } else {
        Err(format!(
            "others' updates are not a snapshot at a data clock in {lowest}..={c}: {v:?}"
        ))
    }
}

fn run_case(
    programs: Programs,
    staleness: Staleness,
    shards: usize,
    capacity: Option<usize>,
) -> Result<(), TestCaseError> {
    run_case_in(programs, staleness, shards, capacity, Mode::Generic)
}

fn run_case_in(
    programs: Programs,
    staleness: Staleness,
    shards: usize,
    capacity: Option<usize>,
    mode: Mode,
) -> Result<(), TestCaseError> {
    let workers = programs.len();
    let t = totals(&programs);
    let mut config = Config::new(workers)
        .with_shards(shards)
        .with_staleness(staleness)
        .with_mode(mode);
    config.cache_capacity = capacity;
    config.contention_threshold = 0.0;
    config.prefetch_chunks = 2;
    let (violations, final_counters, final_sums) = within(30, move || {
        let mut cluster = Cluster::start(config).unwrap();
        let counters = cluster
            .create_table::<i64>("counters", workers * MAX_CLOCKS)
            .unwrap();
        let sums = cluster.create_table::<f64>("sums", 1).unwrap();
        let programs = &programs;
        let t = &t;
        let body = |wk: &mut iterstore::Worker<'_>| -> iterstore::Result<Vec<String>> {
            let w = wk.id();
            let mut found = Vec::new();
            let mut buf = vec![0i64; workers * MAX_CLOCKS];
            for (c, ops) in programs[w].iter().enumerate() {
                let mut own = vec![0i64; ROWS as usize];
                for op in ops {
                    match *op {
                        Op::Read(r) => {
                            wk.read(&counters, r, &mut buf)?;
                            // The zero-copy read is checked the same way; it may see a
                            // newer snapshot than the copy before it.
                            let borrowed = wk.read_with(&counters, r, |v| v.to_vec())?;
                            for v in [&buf, &borrowed] {
                                if let Err(e) =
                                    check_read(staleness, t, w, c, r as usize, own[r as usize], v)
                                {
                                    found.push(format!("worker {w} clock {c} row {r}: {e}"));
                                }
                            }
                        }
                        Op::Update(r, a) => {
                            wk.update_col(&counters, r, w * MAX_CLOCKS + c, a)?;
                            wk.update(&sums, r, &[a as f64])?;
                            own[r as usize] += a;
                        }
                    }
                }
                wk.clock()?;
            }
            Ok(found)
        };
        if mode == Mode::Virtual {
            cluster.virtual_iteration(body).unwrap();
        }
        let violations = cluster.run(body).unwrap();
        let final_counters = cluster.snapshot(&counters).unwrap();
        let final_sums = cluster.snapshot(&sums).unwrap();
        cluster.shutdown().unwrap();
        (violations, final_counters, final_sums)
    });
    let violations: Vec<String> = violations.into_iter().flatten().collect();
    prop_assert!(violations.is_empty(), "{}", violations.join("\n"));
    // The final tables equal the sequential oracle's.
    let t = totals_from_counters(workers, &final_counters);
    let expected: Vec<(u64, f64)> = (0..ROWS)
        .map(|r| (r, t.iter().map(|x| x[r as usize]).sum::<i64>() as f64))
        .filter(|(_, s)| *s != 0.0)
        .collect();
    let got: Vec<(u64, f64)> = final_sums
        .iter()
        .map(|(r, v)| (*r, v[0]))
        .filter(|(_, s)| *s != 0.0)
        .collect();
    prop_assert_eq!(got, expected);
    Ok(())
}

/// Per (worker, clock) column sums per row from a final snapshot.
fn totals_from_counters(workers: usize, rows: &[(u64, Vec<i64>)]) -> Vec<Vec<i64>> {
    let mut t = vec![vec![0i64; ROWS as usize]; workers * MAX_CLOCKS];
    for (r, v) in rows {
        for (col, x) in v.iter().enumerate() {
            t[col][*r as usize] = *x;
        }
    }
    t
}

fn check_final(programs: &Programs) -> impl Fn(&[(u64, Vec<i64>)]) -> bool + '_ {
    move |rows| {
        let t = totals(programs);
        rows.iter().all(|(r, v)| {
            (0..programs.len())
                .all(|w| (0..MAX_CLOCKS).all(|k| v[w * MAX_CLOCKS + k] == t[w][k][*r as usize]))
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn bsp_reads_are_exact_and_final_tables_match_the_oracle(p in programs(), shards in 1usize..=3) {
        run_case(p, Staleness::BSP, shards, None)?;
    }

    #[test]
    fn ssp_1_reads_respect_the_bound(p in programs(), shards in 1usize..=2) {
        run_case(p, Staleness::Bounded(1), shards, None)?;
    }

    #[test]
    fn ssp_3_reads_respect_the_bound(p in programs()) {
        run_case(p, Staleness::Bounded(3), 2, None)?;
    }

    #[test]
    fn async_reads_keep_read_my_writes(p in programs()) {
        run_case(p, Staleness::Unbounded, 1, None)?;
    }

    #[test]
    fn lru_bounded_cache_gives_the_same_guarantees(p in programs(), s in 0u32..=2) {
        run_case(p, Staleness::Bounded(s), 2, Some(2))?;
    }
}

#[test]
fn final_counters_match_per_clock_totals() {
    // A fixed program with every worker touching every row in every clock.
    let programs: Programs = (0..3)
        .map(|w| {
            (0..MAX_CLOCKS)
                .map(|k| {
                    (0..ROWS)
                        .map(|r| Op::Update(r, (w + k + 1) as i64))
                        .chain([Op::Read(k as u64 % ROWS)])
                        .collect()
                })
                .collect()
        })
        .collect();
    let check = check_final(&programs);
    let p2 = programs.clone();
    let rows = within(30, move || {
        let mut cluster = Cluster::start(Config::new(3).with_shards(2)).unwrap();
        let counters = cluster
            .create_table::<i64>("counters", 3 * MAX_CLOCKS)
            .unwrap();
        let p2 = &p2;
        cluster
            .run(|wk| {
                let w = wk.id();
                for (c, ops) in p2[w].iter().enumerate() {
                    for op in ops {
                        if let Op::Update(r, a) = op {
                            wk.update_col(&counters, *r, w * MAX_CLOCKS + c, *a)?;
                        }
                    }
                    wk.clock()?;
                }
                Ok(())
            })
            .unwrap();
        cluster.snapshot(&counters).unwrap()
    });
    assert_eq!(rows.len(), ROWS as usize);
    assert!(check(&rows));
}

/// The SSP properties of this module through the virtually-specialized store.
pub fn check_specialized_ssp() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    });
    for staleness in [
        Staleness::BSP,
        Staleness::Bounded(1),
        Staleness::Bounded(3),
        Staleness::Unbounded,
    ] {
        runner
            .run(&(programs(), 1usize..=2), |(p, shards)| {
                run_case_in(p, staleness, shards, None, Mode::Virtual)
            })
            .unwrap();
    }
}
