//! Checkpoint and resume (`Cluster::checkpoint`, `Cluster::resume`): a run checkpointed,
//! abandoned and resumed on a fresh cluster — of the same or another number of
//! processes, in every mode — ends bit-identical to an uninterrupted run; a checkpoint
//! that is missing, corrupt or of another run is refused naming the file, on every
//! process; a process lost during a checkpoint fails the others instead of hanging them.

use crate::util::{within, TempDir};
use iterstore::checkpoints::{CheckpointError, ClusterRule};
use iterstore::{Cluster, Config, Error, Mode, Result, Table, Worker};
use std::path::{Path, PathBuf};

/// Workers in the whole cluster, however they are split into processes.
const WORKERS: usize = 2;
const ROWS: u64 = 12;
const APP: &str = "ckpt-test";

#[derive(Clone, Copy)]
struct Tables {
    t: Table<f64>,
    n: Table<i64>,
}

fn tables(c: &mut Cluster) -> Result<Tables> {
    Ok(Tables {
        t: c.create_table("ckpt.t", 3)?,
        n: c.create_table("ckpt.n", 1)?,
    })
}

/// One iteration of two clocks: reads feed the updates, in floating point, so any row
/// restored wrongly or any update applied in another order changes the bits.
fn iteration(w: &mut Worker<'_>, tabs: Tables) -> Result<()> {
    let id = w.id() as u64;
    for clock in 0..2u64 {
        for k in 0..4u64 {
            let r = (id * 5 + k * 3 + clock) % ROWS;
            let mut row = [0.0; 3];
            w.read(&tabs.t, r, &mut row)?;
            let delta = [
                row[0] * 0.5 + 1.0 + id as f64 / 3.0,
                row[1] * 0.9 + 0.1,
                row[2] - row[0] * 0.25 + 0.7,
            ];
            w.update(&tabs.t, (r + 1) % ROWS, &delta)?;
            w.update(&tabs.n, r % 5, &[1 + id as i64])?;
        }
        w.clock()?;
    }
    Ok(())
}

fn runs(c: &mut Cluster, tabs: Tables, n: usize) -> Result<()> {
    for _ in 0..n {
        c.run(|w| iteration(w, tabs))?;
    }
    Ok(())
}

/// The virtual iteration a specialized mode needs before its runs.
fn prepare(c: &mut Cluster, tabs: Tables) -> Result<()> {
    if c.config().mode == Mode::Virtual {
        c.virtual_iteration(|w| iteration(w, tabs))?;
    }
    Ok(())
}

/// Both tables, floats as their bits.
type Final = (Vec<(u64, Vec<u64>)>, Vec<(u64, Vec<i64>)>);

fn final_tables(c: &Cluster, tabs: Tables) -> Result<Final> {
    let t = c.snapshot(&tabs.t)?;
    let t = t
        .into_iter()
        .map(|(r, v)| (r, v.iter().map(|x| x.to_bits()).collect()))
        .collect();
    Ok((t, c.snapshot(&tabs.n)?))
}

fn config(processes: usize, mode: Mode) -> Config {
    Config::new(WORKERS / processes)
        .with_shards(2)
        .with_mode(mode)
}

/// Rank 0's result of `body` on `processes` processes (all must agree).
fn on<R: Send + PartialEq + std::fmt::Debug>(
    processes: usize,
    mode: Mode,
    body: impl Fn(&mut Cluster) -> Result<R> + Sync,
) -> Result<R> {
    let mut all = Cluster::run_local_processes(config(processes, mode), processes, body)?;
    for (rank, r) in all.iter().enumerate().skip(1) {
        assert_eq!(r, &all[0], "process {rank} disagrees with process 0");
    }
    Ok(all.swap_remove(0))
}

fn uninterrupted(total_runs: usize) -> Final {
    on(1, Mode::Generic, |c| {
        let tabs = tables(c)?;
        runs(c, tabs, total_runs)?;
        final_tables(c, tabs)
    })
    .unwrap()
}

/// Runs `before` runs, checkpoints into `dir`, runs one more (lost), then resumes a
/// fresh cluster of `after` processes from `dir` and runs the rest.
fn interrupted(
    dir: &Path,
    (before, after): (usize, usize),
    mode: Mode,
    total_runs: usize,
) -> Final {
    let at = 3;
    let written = on(before, mode, |c| {
        let tabs = tables(c)?;
        prepare(c, tabs)?;
        runs(c, tabs, at - 1)?;
        let first = c.checkpoint(dir, APP)?;
        runs(c, tabs, 1)?;
        let second = c.checkpoint(dir, APP)?;
        runs(c, tabs, 1)?; // lost: after the last checkpoint
        Ok((first, second))
    })
    .unwrap();
    assert!(!written.0.exists(), "the older checkpoint was pruned");
    assert_eq!(written.1, dir.join("ckpt-00000006"));
    let rule = if before == after {
        ClusterRule::Same
    } else {
        ClusterRule::Any
    };
    on(after, mode, |c| {
        let tabs = tables(c)?;
        let resumed = c.resume(dir, APP, rule)?;
        assert_eq!(resumed.clock(), 2 * at as u64);
        assert_eq!(resumed.processes(), before);
        prepare(c, tabs)?;
        runs(c, tabs, total_runs - at)?;
        final_tables(c, tabs)
    })
    .unwrap()
}

#[test]
fn a_resumed_run_ends_bit_identical_to_an_uninterrupted_one() {
    within(120, || {
        let expected = uninterrupted(6);
        assert_eq!(expected.0.len(), ROWS as usize, "every row was written");
        for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
            for processes in [(1, 1), (2, 2), (2, 1), (1, 2)] {
                let dir = TempDir::new("resume");
                let got = interrupted(dir.path(), processes, mode, 6);
                assert!(got == expected, "{mode:?}, processes {processes:?}");
            }
        }
    });
}

#[test]
fn application_states_come_back_to_their_ranks() {
    let dir = TempDir::new("app-state");
    let d = dir.path().to_path_buf();
    within(60, move || {
        on(2, Mode::Generic, |c| {
            tables(c)?;
            let state = format!("state of {}", c.rank()).into_bytes();
            c.checkpoint_with(&d, APP, &state)?;
            Ok(())
        })
        .unwrap();
        let states = on(1, Mode::Generic, |c| {
            tables(c)?;
            let resumed = c.resume(&d, APP, ClusterRule::Any)?;
            assert_eq!(resumed.dir(), d.join("ckpt-00000000"));
            (0..3)
                .map(|r| resumed.app_state(r))
                .collect::<Result<Vec<_>>>()
        })
        .unwrap();
        assert_eq!(
            states,
            vec![
                Some(b"state of 0".to_vec()),
                Some(b"state of 1".to_vec()),
                None
            ]
        );
    });
}

/// A checkpoint of one run in a fresh directory; its directory.
fn one_checkpoint(dir: &Path, processes: usize) -> PathBuf {
    on(processes, Mode::Generic, |c| {
        let tabs = tables(c)?;
        runs(c, tabs, 1)?;
        c.checkpoint(dir, APP)
    })
    .unwrap()
}

/// What every process of a fresh cluster of `processes` processes gets resuming from
/// `dir` as `app` with `rule`: the first error.
fn refused(dir: &Path, processes: usize, app: &str, rule: ClusterRule) -> (PathBuf, String) {
    let e = refusal(dir, processes, app, rule);
    (e.path(), e.to_string())
}

/// [`refused`]'s error, typed.
fn refusal(dir: &Path, processes: usize, app: &str, rule: ClusterRule) -> CheckpointError {
    let err = Cluster::run_local_processes(config(processes, Mode::Generic), processes, |c| {
        tables(c)?;
        c.resume(dir, app, rule)?;
        Ok(())
    })
    .unwrap_err();
    match err {
        Error::Checkpoint(e) => e,
        other => panic!("not a checkpoint error: {other}"),
    }
}

#[test]
fn a_corrupt_part_is_refused_naming_it() {
    within(60, || {
        let dir = TempDir::new("corrupt");
        let ckpt = one_checkpoint(dir.path(), 2);
        let part = ckpt.join("shard-1.rows");
        let mut bytes = std::fs::read(&part).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&part, &bytes).unwrap();
        for processes in [1, 2] {
            let (path, message) = refused(dir.path(), processes, APP, ClusterRule::Any);
            assert_eq!(path, part, "{message}");
            assert!(
                message.contains("shard-1.rows: checksum mismatch"),
                "{message}"
            );
        }
        std::fs::remove_file(&part).unwrap();
        let (path, message) = refused(dir.path(), 2, APP, ClusterRule::Same);
        assert_eq!(path, part);
        assert!(message.contains("missing"), "{message}");
    });
}

#[test]
fn no_checkpoint_or_another_runs_checkpoint_is_refused_clearly() {
    within(60, || {
        let dir = TempDir::new("refused");
        let missing = dir.path().join("nothing-here");
        let (path, message) = refused(&missing, 2, APP, ClusterRule::Same);
        assert_eq!(path, missing);
        assert!(message.contains("does not exist"), "{message}");
        let e = refusal(&missing, 1, APP, ClusterRule::Same);
        assert!(matches!(e, CheckpointError::MissingDir { .. }), "{e:?}");
        let (path, message) = refused(dir.path(), 1, APP, ClusterRule::Same);
        assert_eq!(path, dir.path());
        assert!(message.contains("no complete checkpoint"), "{message}");
        one_checkpoint(dir.path(), 2);
        let e = refusal(dir.path(), 1, "other-app", ClusterRule::Any);
        assert!(matches!(e, CheckpointError::MetaMismatch { .. }), "{e:?}");
        let (_, message) = refused(dir.path(), 2, "other-app", ClusterRule::Same);
        assert!(message.contains("written by app ckpt-test"), "{message}");
        let (path, message) = refused(dir.path(), 1, APP, ClusterRule::Same);
        assert!(path.ends_with("MANIFEST.json"), "{}", path.display());
        assert!(
            message.contains("written by a cluster of 2 processes"),
            "{message}"
        );
        // Other tables than the checkpoint's.
        let err = Cluster::run_local_processes(config(2, Mode::Generic), 2, |c| {
            c.create_table::<f64>("ckpt.t", 4)?;
            c.create_table::<i64>("ckpt.n", 1)?;
            c.resume(dir.path(), APP, ClusterRule::Same).map(|_| ())
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("table ckpt.t has width 4 here and 3"),
            "{err}"
        );
    });
}

#[test]
fn a_resume_after_a_run_and_a_second_checkpoint_at_one_clock_are_refused() {
    within(60, || {
        let dir = TempDir::new("misuse");
        let d = dir.path().to_path_buf();
        on(2, Mode::Generic, |c| {
            let tabs = tables(c)?;
            runs(c, tabs, 1)?;
            c.checkpoint(&d, APP)?;
            let again = c.checkpoint(&d, APP).unwrap_err();
            assert!(
                again.to_string().contains("not older than clock 2"),
                "{again}"
            );
            assert!(
                matches!(again, Error::Checkpoint(CheckpointError::NotNewer { .. })),
                "{again:?}"
            );
            // The cluster goes on after a failed checkpoint.
            runs(c, tabs, 1)?;
            let late = c.resume(&d, APP, ClusterRule::Same).unwrap_err();
            assert!(late.to_string().contains("before any run"), "{late}");
            assert!(
                matches!(late, Error::Checkpoint(CheckpointError::TooLate { .. })),
                "{late:?}"
            );
            Ok(())
        })
        .unwrap();
    });
}

#[test]
fn a_process_lost_during_a_checkpoint_fails_the_others_instead_of_hanging_them() {
    let dir = TempDir::new("lost");
    let d = dir.path().to_path_buf();
    let got = within(60, move || {
        Cluster::run_local_processes(config(2, Mode::Generic), 2, |c| {
            let tabs = tables(c)?;
            runs(c, tabs, 1)?;
            if c.rank() == 1 {
                return Ok(None); // leaves the cluster instead of checkpointing
            }
            Ok(Some(
                c.checkpoint(&d, APP).map(|_| ()).map_err(|e| e.to_string()),
            ))
        })
    });
    let lost = match got {
        Ok(results) => results[0].clone(),
        Err(e) => Some(Err(e.to_string())),
    };
    let Some(Err(message)) = lost else {
        panic!("process 0 did not fail: {lost:?}")
    };
    assert!(message.contains("process 1 left"), "{message}");
}
