//! Server-side update rules (issue 41): under BSP runs equal the sequential reference —
//! per clock, each worker's updates of a row summed in its order, the workers' sums added
//! to zeros in worker order, then one `Rule::step` — bit for bit, for every rule, in
//! every mode (the specialized ones with the rule rows planned: their slabs folded into
//! gradients on the shards) and over TCP; a READ returns the servers' value without the
//! worker's own gradients; misuse is refused. (Checkpoints and migrations of rule state:
//! `rule_state.rs`.)

use crate::custom_rules::{custom_rules, registered, registry};
use crate::util::{over_tcp, within};
use iterstore::stats::Stats;
use iterstore::{Cluster, Config, Mode, Rule, Specializations};
use std::collections::BTreeMap;

pub(crate) const ROWS: u64 = 5;
pub(crate) const WIDTH: usize = 3;
pub(crate) const CLOCKS: u64 = 4;
const WORKERS: usize = 3;

/// Every built-in rule but the sum, then the custom ones of `custom_rules.rs` (register
/// them in the configs: [`registered`]).
pub(crate) fn rules() -> Vec<Rule> {
    let built_in = vec![
        Rule::Sgd { lr: 0.1 },
        Rule::Momentum {
            lr: 0.05,
            momentum: 0.9,
        },
        Rule::AdaGrad {
            lr: 0.3,
            eps: 1e-6,
            initial: 0.1,
        },
        Rule::RmsProp {
            lr: 0.01,
            decay: 0.9,
            eps: 1e-7,
        },
        Rule::Adam {
            lr: 0.02,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
    ];
    [built_in, custom_rules()].concat()
}

/// The initial value of row `r`.
pub(crate) fn initial(r: u64) -> Vec<f32> {
    (0..WIDTH)
        .map(|i| 1.0 + r as f32 * 0.5 - i as f32 * 0.25)
        .collect()
}

/// The rows worker `w` updates at clock `c`, in order (one of them twice).
fn touched(w: usize, c: u64) -> [u64; 3] {
    let a = (w as u64 + c) % ROWS;
    [a, (2 * w as u64 + c + 1) % ROWS, a]
}

/// A gradient that depends on what was read: wrong reads give wrong models.
pub(crate) fn gradient(read: &[f32], w: usize, k: usize) -> Vec<f32> {
    read.iter()
        .enumerate()
        .map(|(i, v)| v * 0.5 - (w + k + i) as f32 * 0.125)
        .collect()
}

/// Every clock: read every row, then update `touched` rows by `gradient`s of what was
/// read. Returns what the worker read, flattened per clock.
pub(crate) fn body(
    w: &mut iterstore::Worker<'_>,
    t: &iterstore::Table<f32>,
) -> iterstore::Result<Vec<Vec<f32>>> {
    let mut seen = Vec::new();
    for _ in 0..CLOCKS {
        let c = w.current_clock();
        let mut all = vec![0.0f32; ROWS as usize * WIDTH];
        for (r, row) in all.chunks_exact_mut(WIDTH).enumerate() {
            w.read(t, r as u64, row)?;
        }
        for (k, r) in touched(w.id(), c).into_iter().enumerate() {
            let read = &all[r as usize * WIDTH..(r as usize + 1) * WIDTH];
            w.update(t, r, &gradient(read, w.id(), k))?;
        }
        // A row read after this worker's own gradient: still the servers' value.
        let mut again = vec![0.0f32; WIDTH];
        let r = touched(w.id(), c)[0];
        w.read(t, r, &mut again)?;
        assert_eq!(again, all[r as usize * WIDTH..(r as usize + 1) * WIDTH]);
        seen.push(all);
        w.clock()?;
    }
    Ok(seen)
}

/// The sequential reference of one run of [`body`] per rule of `runs` (the table's rule
/// changed between runs, its state kept): what every worker reads at each clock, and the
/// final rows. Each step is the registry's (`UpdateRules::step`: `Rule::step` for a
/// built-in rule).
pub(crate) fn reference_runs(runs: &[Rule], workers: usize) -> (Vec<Vec<Vec<f32>>>, Vec<Vec<f32>>) {
    let registry = registry();
    let per_element = runs.first().map_or(0, Rule::state_per_element);
    let mut values: Vec<Vec<f32>> = (0..ROWS).map(initial).collect();
    let mut state: Vec<Vec<f32>> = vec![vec![0.0; WIDTH * per_element]; ROWS as usize];
    let mut steps = vec![0u64; ROWS as usize];
    let mut seen = vec![Vec::new(); workers];
    for c in 0..CLOCKS * runs.len() as u64 {
        let rule = runs[(c / CLOCKS) as usize];
        let snapshot: Vec<f32> = values.concat();
        let mut sums: Vec<BTreeMap<u64, Vec<f32>>> = vec![BTreeMap::new(); workers];
        for (w, sum) in sums.iter_mut().enumerate() {
            seen[w].push(snapshot.clone());
            for (k, r) in touched(w, c).into_iter().enumerate() {
                let g = gradient(&values[r as usize], w, k);
                match sum.get_mut(&r) {
                    Some(s) => s.iter_mut().zip(&g).for_each(|(a, b)| *a += b),
                    None => {
                        sum.insert(r, g);
                    }
                }
            }
        }
        for r in 0..ROWS {
            let mut g = vec![0.0f32; WIDTH];
            let mut got = false;
            for sum in &sums {
                if let Some(s) = sum.get(&r).filter(|s| s.iter().any(|v| v.to_bits() != 0)) {
                    g.iter_mut().zip(s).for_each(|(a, b)| *a += b);
                    got = true;
                }
            }
            if got {
                let r = r as usize;
                steps[r] += 1;
                registry.step(&rule, &mut values[r], &g, &mut state[r], steps[r]);
            }
        }
    }
    (seen, values)
}

/// What [`program`] returns: what each worker read per clock (over both runs), the final
/// rows, the stats.
type Outcome = (Vec<Vec<Vec<f32>>>, Vec<Vec<f32>>, Stats);

/// Runs of [`program`]: the first is first-iter mode's recorded one, the second runs
/// specialized in every specialized mode.
const RUNS: usize = 2;

/// `rule`'s table set to the initial rows, then [`RUNS`] runs: what each worker read, the
/// final rows and the stats.
fn program(cluster: &mut Cluster, rule: Rule) -> iterstore::Result<Outcome> {
    let t = cluster.create_table_with_rule::<f32>("w", WIDTH, Some(ROWS), rule)?;
    if cluster.config().mode == Mode::Virtual {
        cluster.virtual_iteration(|w| body(w, &t))?;
    }
    let mine: Vec<(u64, Vec<f32>)> = (0..ROWS)
        .filter(|r| *r as usize % cluster.processes() == cluster.rank())
        .map(|r| (r, initial(r)))
        .collect();
    cluster.set_rows(&t, &mine)?;
    let mut seen: Vec<Vec<Vec<f32>>> = Vec::new();
    for _ in 0..RUNS {
        let run = cluster.run(|w| body(w, &t))?;
        seen.resize(run.len(), Vec::new());
        seen.iter_mut().zip(run).for_each(|(s, r)| s.extend(r));
    }
    let rows = cluster.snapshot(&t)?.into_iter().map(|(_, v)| v).collect();
    Ok((seen, rows, cluster.stats()))
}

/// The specialized stores `program` runs in besides the generic one: first-iter and
/// virtual mode, and virtual mode without views (reads from the process arena) or without
/// the contiguous index (updates through the generic log, reads from the plan).
fn modes() -> Vec<(&'static str, Config)> {
    let without = |f: fn(&mut Specializations)| {
        let mut s = Specializations::ALL;
        f(&mut s);
        s
    };
    let config = |mode| registered(Config::new(WORKERS).with_mode(mode));
    vec![
        ("generic", config(Mode::Generic)),
        ("first-iter", config(Mode::FirstIter)),
        ("virtual", config(Mode::Virtual)),
        (
            "virtual, no views",
            config(Mode::Virtual).with_specializations(without(|s| s.thread_caches = false)),
        ),
        (
            "virtual, no index",
            config(Mode::Virtual).with_specializations(without(|s| s.contiguous_index = false)),
        ),
    ]
}

/// That a specialized store planned the rule table's rows and its workers found them on
/// the plan: the rows were not left to the generic path.
pub(crate) fn assert_planned(stats: &Stats, what: &str) {
    assert!(stats.planned_rule_rows > 0, "{what}: no rule row planned");
    assert_eq!(stats.planned_rule_rows, stats.planned_rows, "{what}");
    assert_eq!(stats.unplanned_accesses, 0, "{what}: accesses off the plan");
    assert!(stats.tape_accesses > 0, "{what}: no access on the tape");
}

#[test]
fn every_rule_equals_the_sequential_reference_bit_for_bit_in_every_mode() {
    within(240, || {
        for rule in rules() {
            let (want_seen, want_rows) = reference_runs(&[rule; RUNS], WORKERS);
            for (what, config) in modes() {
                let mut c = Cluster::start(config).unwrap();
                let (seen, rows, stats) = program(&mut c, rule).unwrap();
                c.shutdown().unwrap();
                assert_eq!(seen, want_seen, "{rule} {what}: reads");
                assert_eq!(rows, want_rows, "{rule} {what}: rows");
                match what {
                    "generic" => assert_eq!(stats.planned_rows, 0),
                    _ => assert_planned(&stats, &format!("{rule} {what}")),
                }
            }
        }
    });
}

#[test]
fn two_processes_over_tcp_equal_the_reference() {
    within(180, || {
        for rule in rules() {
            let (want_seen, want_rows) = reference_runs(&[rule; RUNS], 4);
            for mode in [Mode::Generic, Mode::Virtual] {
                let config = registered(Config::new(2).with_mode(mode));
                let parts = over_tcp(config, 2, |c| program(c, rule));
                let seen: Vec<_> = parts.iter().flat_map(|(s, _, _)| s.clone()).collect();
                assert_eq!(seen, want_seen, "{rule} {mode:?}");
                for (_, rows, stats) in &parts {
                    assert_eq!(rows, &want_rows, "{rule} {mode:?}");
                    if mode == Mode::Virtual {
                        assert_planned(stats, &format!("{rule} over TCP"));
                    }
                }
            }
        }
    });
}

#[test]
fn misuse_is_named() {
    within(60, || {
        let mut c = Cluster::start(Config::new(1)).unwrap();
        let e = c
            .create_table_with_rule::<i64>("i", 1, None, Rule::Sgd { lr: 0.1 })
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs a table of f32 or f64"), "{e}");
        let e = c
            .create_table_with_rule::<f32>(
                "f",
                1,
                None,
                Rule::AdaGrad {
                    lr: 0.1,
                    eps: 0.0,
                    initial: 0.0,
                },
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("eps = 0 must be finite and > 0"), "{e}");
        let t = c
            .create_table_with_rule::<f32>("f", 1, None, Rule::Sgd { lr: 0.1 })
            .unwrap();
        c.run(|w| {
            w.update(&t, 0, &[1.0])?;
            w.clock()
        })
        .unwrap();
        c.shutdown().unwrap();
    });
}

#[test]
fn processes_giving_different_rules_fail() {
    within(60, || {
        let results = crate::util::over_tcp_results(Config::new(1), 2, |c| {
            let lr = if c.rank() == 0 { 0.1 } else { 0.2 };
            c.create_table_with_rule::<f32>("w", 1, None, Rule::Sgd { lr })?;
            Ok(())
        });
        let failed: Vec<String> = results
            .iter()
            .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
            .collect();
        assert!(
            failed
                .iter()
                .any(|e| e.contains("table 'w' declared with rule sgd(lr=0.")
                    && e.contains("by another")),
            "{failed:?}"
        );
    });
}

#[test]
fn a_rule_changed_between_runs_steps_the_next_run_with_its_new_parameters() {
    within(60, || {
        let (first, second) = (
            Rule::Momentum {
                lr: 0.5,
                momentum: 0.5,
            },
            Rule::Momentum {
                lr: 0.25,
                momentum: 0.75,
            },
        );
        let mut c = Cluster::start(Config::new(2)).unwrap();
        let t = c
            .create_table_with_rule::<f64>("w", 1, Some(1), first)
            .unwrap();
        let step = |w: &mut iterstore::Worker<'_>| {
            w.update(&t, 0, &[1.0])?;
            w.clock()
        };
        c.run(step).unwrap();
        c.set_rule(&t, second).unwrap();
        c.run(step).unwrap();
        // The reference: one step of each, the velocity kept.
        let (mut w, mut v) = ([0.0f64], [0.0f64]);
        first.step(&mut w, &[2.0], &mut v, 1);
        second.step(&mut w, &[2.0], &mut v, 2);
        assert_eq!(c.snapshot(&t).unwrap(), vec![(0, w.to_vec())]);
        let e = c
            .set_rule(&t, Rule::Sgd { lr: 0.1 })
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot become sgd(lr=0.1) (another kind"), "{e}");
        let e = c
            .set_rule(
                &t,
                Rule::Momentum {
                    lr: 0.1,
                    momentum: 1.5,
                },
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("momentum = 1.5 must be in [0, 1)"), "{e}");
        c.shutdown().unwrap();
    });
}

#[test]
fn processes_changing_a_rule_differently_both_fail_naming_it() {
    within(60, || {
        let results = crate::util::over_tcp_results(Config::new(1), 2, |c| {
            let t = c.create_table_with_rule::<f32>("w", 1, None, Rule::Sgd { lr: 0.1 })?;
            c.set_rule(
                &t,
                Rule::Sgd {
                    lr: 0.01 * (1 + c.rank()) as f64,
                },
            )
        });
        for r in results {
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains("rule of table 'w'") && e.contains("rank 1: sgd(lr=0.02)"),
                "{e}"
            );
        }
    });
}
