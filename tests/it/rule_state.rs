//! Update-rule state in checkpoints and migrations (issue 41): a run of a table with a
//! server-side rule, its parameters changed by `set_rule`, checkpointed and resumed —
//! in every mode, in one process and over TCP, onto another number of processes — reads
//! and ends with the bits of the sequential reference; rows that locality placement
//! migrates keep stepping as if they had stayed; a checkpoint of the format before rules
//! is still read, and refused for a table that now has a rule; a damaged rule state is
//! refused naming the part.

use crate::custom_rules::{registered, registry};
use crate::rules::{body, gradient, initial, reference_runs, rules, CLOCKS, ROWS, WIDTH};
use crate::util::{over_tcp, within, TempDir};
use iterstore::checkpoints::ClusterRule;
use iterstore::{Cluster, Config, Mode, Result, Rule};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const APP: &str = "rule-state";
/// Workers of the whole cluster, however many processes it has.
const WORKERS: usize = 4;
/// Runs in all; the checkpoint is taken after [`AT`] of them.
const RUNS: usize = 4;
const AT: usize = 2;

/// `rule` with half its learning rate: what `set_rule` makes of it after the first run.
fn halved(rule: Rule) -> Rule {
    match rule {
        Rule::Sum => Rule::Sum,
        Rule::Sgd { lr } => Rule::Sgd { lr: lr / 2.0 },
        Rule::Momentum { lr, momentum } => Rule::Momentum {
            lr: lr / 2.0,
            momentum,
        },
        Rule::AdaGrad { lr, eps, initial } => Rule::AdaGrad {
            lr: lr / 2.0,
            eps,
            initial,
        },
        Rule::RmsProp { lr, decay, eps } => Rule::RmsProp {
            lr: lr / 2.0,
            decay,
            eps,
        },
        Rule::Adam {
            lr,
            beta1,
            beta2,
            eps,
        } => Rule::Adam {
            lr: lr / 2.0,
            beta1,
            beta2,
            eps,
        },
        Rule::Custom(c) => {
            let mut params = c.params().to_vec();
            params[0] /= 2.0;
            registered(Config::default())
                .rule(c.name(), &params)
                .unwrap()
        }
    }
}

/// `body` on a cluster of `processes` processes of `WORKERS / processes` workers each, in
/// `mode`: one process alone, or several over TCP. Each process's result, in rank order.
fn on<R: Send>(
    processes: usize,
    mode: Mode,
    body: impl Fn(&mut Cluster) -> Result<R> + Sync,
) -> Vec<R> {
    let config = registered(Config::new(WORKERS / processes).with_mode(mode));
    if processes == 1 {
        let mut c = Cluster::start(config).unwrap();
        let r = body(&mut c).unwrap();
        c.shutdown().unwrap();
        vec![r]
    } else {
        over_tcp(config, processes, body)
    }
}

/// What the workers of a process read in its runs, per worker and clock; the final rows.
type Outcome = (Vec<Vec<Vec<f32>>>, Vec<Vec<f32>>);

/// The table "w" with `rule` and its virtual iteration in virtual mode.
fn table(c: &mut Cluster, rule: Rule) -> Result<iterstore::Table<f32>> {
    let t = c.create_table_with_rule::<f32>("w", WIDTH, Some(ROWS), rule)?;
    if c.config().mode == Mode::Virtual {
        c.virtual_iteration(|w| body(w, &t))?;
    }
    Ok(t)
}

/// The interrupted run: the initial rows, run 0 with `rule`, its rule halved, runs up to
/// [`AT`], a checkpoint into `dir`, then a run lost.
fn written(c: &mut Cluster, dir: &Path, rule: Rule) -> Result<()> {
    let t = table(c, rule)?;
    let mine: Vec<(u64, Vec<f32>)> = (0..ROWS)
        .filter(|r| *r as usize % c.processes() == c.rank())
        .map(|r| (r, initial(r)))
        .collect();
    c.set_rows(&t, &mine)?;
    c.run(|w| body(w, &t))?;
    c.set_rule(&t, halved(rule))?;
    for _ in 1..AT {
        c.run(|w| body(w, &t))?;
    }
    c.checkpoint(dir, APP)?;
    c.run(|w| body(w, &t))?; // lost: after the checkpoint
    Ok(())
}

/// The resumed run: the table created with `rule` (the checkpoint brings back the halved
/// one), resumed from `dir`, then the runs after [`AT`].
fn resumed(c: &mut Cluster, dir: &Path, rule: Rule, cluster: ClusterRule) -> Result<Outcome> {
    let t = c.create_table_with_rule::<f32>("w", WIDTH, Some(ROWS), rule)?;
    let back = c.resume(dir, APP, cluster)?;
    assert_eq!(back.clock(), AT as u64 * CLOCKS);
    if c.config().mode == Mode::Virtual {
        c.virtual_iteration(|w| body(w, &t))?;
    }
    let mut seen: Vec<Vec<Vec<f32>>> = Vec::new();
    for _ in AT..RUNS {
        let run = c.run(|w| body(w, &t))?;
        if seen.is_empty() {
            seen = run;
        } else {
            for (all, more) in seen.iter_mut().zip(run) {
                all.extend(more);
            }
        }
    }
    let rows = c.snapshot(&t)?.into_iter().map(|(_, v)| v).collect();
    Ok((seen, rows))
}

/// Checkpoints a run of `rule` on `before` processes and resumes it on `after`; checks
/// what the resumed runs read and the final rows against the sequential reference.
fn resumes_to_the_reference(rule: Rule, mode: Mode, (before, after): (usize, usize)) {
    let dir = TempDir::new("rule-state");
    on(before, mode, |c| written(c, dir.path(), rule));
    let cluster = if before == after {
        ClusterRule::Same
    } else {
        ClusterRule::Any
    };
    let parts = on(after, mode, |c| resumed(c, dir.path(), rule, cluster));
    let mut schedule = vec![halved(rule); RUNS];
    schedule[0] = rule;
    let (want_seen, want_rows) = reference_runs(&schedule, WORKERS);
    let seen: Vec<_> = parts.iter().flat_map(|(s, _)| s.clone()).collect();
    let from = AT * CLOCKS as usize;
    let want_seen: Vec<_> = want_seen.iter().map(|s| s[from..].to_vec()).collect();
    let what = format!("{rule} {mode:?} on {before} then {after} processes");
    assert_eq!(seen, want_seen, "{what}: reads");
    for (_, rows) in &parts {
        let bits = |rows: &[Vec<f32>]| -> Vec<Vec<u32>> {
            rows.iter()
                .map(|r| r.iter().map(|v| v.to_bits()).collect())
                .collect()
        };
        assert_eq!(bits(rows), bits(&want_rows), "{what}: rows");
    }
}

#[test]
fn every_rule_resumed_in_one_process_equals_the_reference_in_every_mode() {
    within(300, || {
        for rule in rules() {
            for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
                resumes_to_the_reference(rule, mode, (1, 1));
            }
        }
    });
}

#[test]
fn a_rule_resumed_over_tcp_and_onto_another_number_of_processes_equals_the_reference() {
    within(300, || {
        for rule in [rules()[2], rules()[4], rules()[6]] {
            for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
                for shape in [(2, 2), (2, 1), (1, 2)] {
                    resumes_to_the_reference(rule, mode, shape);
                }
            }
        }
    });
}

/// Worker `w` reads and steps rows `2w` and `2w + 1` only, so locality placement moves
/// them to its process.
fn own_rows(w: &mut iterstore::Worker<'_>, t: &iterstore::Table<f32>) -> Result<()> {
    for _ in 0..CLOCKS {
        let id = w.id();
        for r in [2 * id as u64, 2 * id as u64 + 1] {
            let mut row = vec![0.0f32; WIDTH];
            w.read(t, r, &mut row)?;
            w.update(t, r, &gradient(&row, id, r as usize))?;
        }
        w.clock()?;
    }
    Ok(())
}

#[test]
fn rule_rows_migrated_by_locality_placement_step_on_as_the_reference() {
    within(120, || {
        let rows = 2 * WORKERS as u64;
        for rule in rules() {
            // The reference: every row stepped each clock with its worker's gradient.
            let registry = registry();
            let mut values: Vec<Vec<f32>> = (0..rows).map(initial).collect();
            let mut state = vec![vec![0.0f32; WIDTH * rule.state_per_element()]; rows as usize];
            for step in 1..=3 * CLOCKS {
                for r in 0..rows as usize {
                    let g = gradient(&values[r], r / 2, r);
                    registry.step(&rule, &mut values[r], &g, &mut state[r], step);
                }
            }
            // First-iteration mode: the first run is generic and its rows, which then
            // hold values and rule state, move to their workers' processes.
            let got = Cluster::run_local_processes(
                registered(Config::new(WORKERS / 2).with_mode(Mode::FirstIter)),
                2,
                |c| {
                    let t = c.create_table_with_rule::<f32>("w", WIDTH, Some(rows), rule)?;
                    let mine: Vec<(u64, Vec<f32>)> = (0..rows)
                        .filter(|r| *r as usize % 2 == c.rank())
                        .map(|r| (r, initial(r)))
                        .collect();
                    c.set_rows(&t, &mine)?;
                    for _ in 0..3 {
                        c.run(|w| own_rows(w, &t))?;
                    }
                    let stats = c.stats();
                    let homes: Vec<usize> =
                        (0..rows).map(|r| c.home_of(&t, r)).collect::<Result<_>>()?;
                    let rows: Vec<Vec<f32>> = c.snapshot(&t)?.into_iter().map(|(_, v)| v).collect();
                    Ok((stats.migrations, stats.placed_rows, homes, rows))
                },
            )
            .unwrap();
            for (rank, (migrations, placed, homes, rows)) in got.iter().enumerate() {
                assert_eq!(*migrations, 1, "{rule}: process {rank} migrated once");
                assert!(*placed > 0, "{rule}: some rows moved off their hash shard");
                let want: Vec<usize> = (0..2 * WORKERS).map(|r| r / 2 / (WORKERS / 2)).collect();
                assert_eq!(homes, &want, "{rule}: each row on its worker's process");
                let bits = |rows: &[Vec<f32>]| -> Vec<u32> {
                    rows.iter().flatten().map(|v| v.to_bits()).collect()
                };
                assert_eq!(bits(rows), bits(&values), "{rule}: process {rank}'s rows");
            }
        }
    });
}

/// The SHA-256 of `bytes` in lowercase hex, as a manifest lists it.
fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Rewrites part `name` of the checkpoint in `ckpt` with `edit` and lists its new size
/// and checksum in the manifest (whose JSON `manifest` may change too): damage that only
/// decoding the part can find.
fn rewrite(
    ckpt: &Path,
    name: &str,
    edit: impl Fn(&mut Vec<u8>),
    manifest: impl Fn(&mut serde_json::Value),
) {
    let part = ckpt.join(name);
    let mut bytes = std::fs::read(&part).unwrap();
    edit(&mut bytes);
    std::fs::write(&part, &bytes).unwrap();
    let path = ckpt.join("MANIFEST.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for p in m["parts"].as_array_mut().unwrap() {
        if p["name"] == name {
            p["size"] = bytes.len().into();
            p["sha256"] = sha256(&bytes).into();
        }
    }
    manifest(&mut m);
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

/// A checkpoint of one run on table "w" with `rule` in a fresh directory ([`body`], or
/// for a sum one clock adding ones to every row); the checkpoint's directory and the
/// final rows.
fn one_checkpoint(dir: &Path, rule: Rule) -> (PathBuf, Vec<(u64, Vec<f32>)>) {
    on(1, Mode::Generic, |c| {
        let t = c.create_table_with_rule::<f32>("w", WIDTH, Some(ROWS), rule)?;
        c.set_rows(&t, &(0..ROWS).map(|r| (r, initial(r))).collect::<Vec<_>>())?;
        if rule.is_sum() {
            c.run(|w| {
                for r in 0..ROWS {
                    w.update(&t, r, &[1.0; WIDTH])?;
                }
                w.clock()
            })?;
        } else {
            c.run(|w| body(w, &t))?;
        }
        Ok((c.checkpoint(dir, APP)?, c.snapshot(&t)?))
    })
    .remove(0)
}

/// What resuming from `dir` with table "w" of `rule` gives: its rows, or the error.
fn resume_rows(dir: &Path, rule: Rule) -> std::result::Result<Vec<(u64, Vec<f32>)>, String> {
    let mut c = Cluster::start(registered(Config::new(WORKERS))).unwrap();
    let got = (|| {
        let t = c.create_table_with_rule::<f32>("w", WIDTH, Some(ROWS), rule)?;
        c.resume(dir, APP, ClusterRule::Any)?;
        c.snapshot(&t)
    })();
    let _ = c.shutdown();
    got.map_err(|e| e.to_string())
}

#[test]
fn a_checkpoint_of_the_format_before_rules_is_read_and_refused_for_a_table_with_a_rule() {
    within(60, || {
        let dir = TempDir::new("version-1");
        let (ckpt, rows) = one_checkpoint(dir.path(), Rule::Sum);
        // Version 1: the rows part without its states count, the manifest without rules.
        rewrite(
            &ckpt,
            "shard-0.rows",
            |b| {
                assert_eq!(b[8..12], 2u32.to_le_bytes(), "a version 2 part");
                assert_eq!(b[32..40], 0u64.to_le_bytes(), "no rule states");
                b[8..12].copy_from_slice(&1u32.to_le_bytes());
                b.drain(32..40);
            },
            |m| m["version"] = 1.into(),
        );
        assert_eq!(resume_rows(dir.path(), Rule::Sum), Ok(rows));
        let e = resume_rows(dir.path(), rules()[0]).unwrap_err();
        assert!(
            e.contains(
                "MANIFEST.json: table w has update rule sgd(lr=0.1) here and sum in the \
                        checkpoint"
            ),
            "{e}"
        );
    });
}

#[test]
fn a_damaged_rule_state_is_refused_naming_the_part() {
    within(60, || {
        let dir = TempDir::new("bad-state");
        let adam = rules()[4];
        let (ckpt, _) = one_checkpoint(dir.path(), adam);
        // The last state cut short, the manifest's checksum made to match.
        rewrite(&ckpt, "shard-0.rows", |b| b.truncate(b.len() - 4), |_| {});
        let e = resume_rows(dir.path(), adam).unwrap_err();
        let part = ckpt.join("shard-0.rows");
        assert!(
            e.contains(&format!("{}: ", part.display()))
                && e.contains("ends in the middle of rule state"),
            "{e}"
        );
        // A rule of another kind cannot take the state.
        let e = resume_rows(dir.path(), rules()[2]).unwrap_err();
        assert!(
            e.contains("table w has update rule adagrad(") && e.contains("and adam("),
            "{e}"
        );
    });
}
