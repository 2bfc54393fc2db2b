//! `iterstore run ... --checkpoint-dir D --checkpoint-every N` and `--resume D`: a run
//! killed with SIGKILL at a random (seeded) point after its first checkpoint, then resumed
//! from its newest complete checkpoint, writes the same output bytes as an uninterrupted
//! run (BSP, fixed seed), for every app at 1 and 2 processes (the DNN with a server rule
//! too); corrupt and other apps' checkpoints are refused naming the file; bad options
//! fail before any work.
//!
//! Children are [`Proc`]s: bounded waits, killed on drop. A killed launcher's children
//! die with it (they are started with a parent-death signal); the test checks that none
//! is left.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use crate::procs::{children_of, Proc, QUICK};
use crate::util::{iterstore, scratch};

/// Iterations of every run: enough that a run is still going some time after its first
/// checkpoint (each checkpoint fsyncs its files).
const ITERS: &str = "20";

/// `run APP --synthetic tiny --iters ITERS -q --output OUT` on `shape` (`(processes,
/// workers)`: 1 process runs alone, more through the `--processes` launcher) plus
/// `extra`.
fn args<'a>(app: &'a str, out: &'a str, shape: &'a [String; 2], extra: &[&'a str]) -> Vec<&'a str> {
    // `dnn-partitioned`: the DNN as one replica whose 2 workers hold half of each layer;
    // `cnn-partitioned`: a small CNN split alike (its poolings and output layer too).
    // `dnn-adam`: the DNN with Adam on the parameter servers (`--server-rule`).
    let command = if app.ends_with("-partitioned") || app == "dnn-adam" {
        "dnn"
    } else {
        app
    };
    let mut a = vec![
        "run",
        command,
        "--synthetic",
        "tiny",
        "--iters",
        ITERS,
        "-q",
        "--output",
        out,
        "--workers",
        &shape[1],
    ];
    if shape[0] != "1" {
        a.extend(["--processes", &shape[0]]);
    }
    if command == "dnn" {
        // A small network: 20 epochs in a few seconds.
        a.extend(["--hidden", "32"]);
    }
    if app == "dnn-adam" {
        a.extend(["--server-rule", "adam"]);
    }
    if app == "dnn-partitioned" {
        a.extend(["--replicas", "1", "--partitions", "2,2"]);
    }
    if app == "cnn-partitioned" {
        a.extend(["--model", "cnn", "--channels", "4,4", "--kernel", "3"]);
        a.extend(["--replicas", "1", "--partitions", "2,2,2,2,1,2"]);
    }
    a.extend(extra);
    a
}

/// Whether `dir` holds a complete checkpoint (a `ckpt-*` directory with its manifest).
fn has_checkpoint(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with("ckpt-")
                && e.path().join("MANIFEST.json").exists()
        })
    })
}

/// Whether process `pid` is gone (or a zombie, about to be).
fn gone(pid: libc::pid_t) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Waits at most [`QUICK`] until every process of `pids` is gone.
fn wait_gone(pids: &[libc::pid_t]) {
    let deadline = Instant::now() + QUICK;
    while !pids.iter().all(|&p| gone(p)) {
        assert!(
            Instant::now() < deadline,
            "processes {pids:?} still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The uninterrupted output against a run killed after a random delay (from `seed`) past
/// its first checkpoint and resumed on `after` (`(processes, workers)`), both written by
/// `before`'s shape for the killed run.
fn killed_and_resumed_writes_the_same_bytes(
    app: &str,
    before: (usize, usize),
    after: (usize, usize),
    seed: u64,
) {
    let name = format!(
        "ckpt-kill-{app}-{}x{}-{}x{}",
        before.0, before.1, after.0, after.1
    );
    let dir = scratch(&name);
    let path = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let (full, part, resumed, ck) = (path("full"), path("part"), path("resumed"), path("ck"));
    let shape = |(p, w): (usize, usize)| [p.to_string(), w.to_string()];
    let total = (before.0 * before.1).to_string();

    let mut p = Proc::start(
        &dir,
        "full",
        &args(app, &full, &["1".into(), total], &[]),
        |_| {},
    );
    p.wait_ok(QUICK);
    let want = std::fs::read(&full).unwrap();
    assert!(!want.is_empty());

    let every = ["--checkpoint-dir", &ck, "--checkpoint-every", "1"];
    let b = shape(before);
    // Kill after a random delay past the first checkpoint; a run that ends first (a fast
    // machine) is started again with a shorter delay, so the kill always lands mid-run.
    let mut delay = rand::rngs::StdRng::seed_from_u64(seed).gen_range(0..100);
    for attempt in 0.. {
        let _ = std::fs::remove_dir_all(&ck);
        let mut run = Proc::start(&dir, "killed", &args(app, &part, &b, &every), |_| {});
        let deadline = Instant::now() + QUICK;
        while !has_checkpoint(Path::new(&ck)) {
            assert!(
                run.poll().is_none() && Instant::now() < deadline,
                "no checkpoint written; stderr:\n{}",
                run.stderr()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(delay));
        let children = children_of(run.pid());
        let killed = run.poll().is_none();
        run.kill(); // SIGKILL; a launcher's children die with it
        wait_gone(&children);
        if killed {
            break;
        }
        assert!(
            attempt < 4,
            "{name}: the run ended before every kill (last delay {delay} ms); stderr:\n{}",
            run.stderr()
        );
        delay /= 4;
    }

    let a = shape(after);
    let mut extra = vec!["--resume", &ck];
    extra.extend(every);
    let mut r = Proc::start(&dir, "resumed", &args(app, &resumed, &a, &extra), |_| {});
    r.wait_ok(QUICK);
    let got = std::fs::read(&resumed).unwrap();
    assert!(
        got == want,
        "{name}: the resumed run (killed after {delay} ms) differs from the uninterrupted one"
    );
    assert!(
        r.stderr().contains("resumed from") || r.stdout().contains("resumed from"),
        "{name}: no word of the resume:\n{}{}",
        r.stdout(),
        r.stderr()
    );
}

#[test]
fn mf_killed_and_resumed_writes_the_same_bytes() {
    killed_and_resumed_writes_the_same_bytes("mf", (1, 2), (1, 2), 1);
    killed_and_resumed_writes_the_same_bytes("mf", (2, 1), (2, 1), 2);
}

#[test]
fn pagerank_killed_and_resumed_writes_the_same_bytes() {
    killed_and_resumed_writes_the_same_bytes("pagerank", (1, 2), (1, 2), 3);
    killed_and_resumed_writes_the_same_bytes("pagerank", (2, 1), (2, 1), 4);
}

#[test]
fn lda_killed_and_resumed_writes_the_same_bytes() {
    killed_and_resumed_writes_the_same_bytes("lda", (1, 2), (1, 2), 7);
    killed_and_resumed_writes_the_same_bytes("lda", (2, 1), (2, 1), 8);
}

#[test]
fn dnn_killed_and_resumed_writes_the_same_bytes() {
    killed_and_resumed_writes_the_same_bytes("dnn", (1, 2), (1, 2), 10);
    killed_and_resumed_writes_the_same_bytes("dnn", (2, 1), (1, 2), 11);
    killed_and_resumed_writes_the_same_bytes("dnn-partitioned", (1, 2), (2, 1), 12);
    killed_and_resumed_writes_the_same_bytes("cnn-partitioned", (2, 1), (1, 2), 13);
}

#[test]
fn dnn_with_a_server_rule_killed_and_resumed_writes_the_same_bytes() {
    // The moments and step counts of Adam on the servers, and its step decayed per epoch,
    // come back from the checkpoint; on another split, with the rows re-placed.
    killed_and_resumed_writes_the_same_bytes("dnn-adam", (1, 2), (1, 2), 16);
    killed_and_resumed_writes_the_same_bytes("dnn-adam", (2, 1), (1, 2), 17);
}

#[test]
fn logreg_killed_and_resumed_writes_the_same_bytes() {
    killed_and_resumed_writes_the_same_bytes("logreg", (1, 2), (1, 2), 14);
    // The L-BFGS history is the same on every worker: another split of as many shards.
    killed_and_resumed_writes_the_same_bytes("logreg", (2, 1), (1, 2), 15);
}

#[test]
fn a_checkpoint_resumes_on_another_number_of_processes_with_as_many_workers() {
    killed_and_resumed_writes_the_same_bytes("pagerank", (2, 1), (1, 2), 5);
    killed_and_resumed_writes_the_same_bytes("mf", (1, 2), (2, 1), 6);
    killed_and_resumed_writes_the_same_bytes("lda", (2, 1), (1, 2), 9);
}

#[test]
fn lda_resumes_on_another_total_of_workers_and_pagerank_refuses_it() {
    let dir = scratch("ckpt-other-workers");
    for app in ["lda", "pagerank"] {
        let ck = dir.join(app);
        let ck = ck.to_str().unwrap();
        let run = |workers: &str, extra: &[&str]| {
            let mut a = vec!["run", app, "--synthetic", "tiny", "--iters", "3", "-q"];
            a.extend(["--workers", workers]);
            a.extend(extra);
            iterstore(&a)
        };
        let first = run("2", &["--checkpoint-dir", ck, "--checkpoint-every", "2"]);
        assert!(first.status.success());
        let out = run("3", &["--resume", ck]);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        if app == "lda" {
            // The assignments are per document: they re-partition over 3 workers.
            assert!(out.status.success(), "{stderr}");
            assert!(stdout.contains("after iteration 2"), "{stdout}");
        } else {
            assert!(!out.status.success());
            assert!(
                stderr.contains("written by 2 workers in all, this run has 3"),
                "{stderr}"
            );
        }
    }
}

/// Writes a checkpoint of `app` after 2 iterations into `dir/ck`; returns its directory.
fn checkpointed(dir: &Path, app: &str) -> PathBuf {
    let ck = dir.join("ck");
    let out = iterstore(&[
        "run",
        app,
        "--synthetic",
        "tiny",
        "--iters",
        "2",
        "-q",
        "--checkpoint-dir",
        ck.to_str().unwrap(),
        "--checkpoint-every",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_dir(&ck)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("MANIFEST.json").exists())
        .expect("a complete checkpoint")
}

/// `run APP --synthetic tiny --iters 4 --resume D` (expected to fail); its stderr.
fn resume_fails(app: &str, dir: &Path) -> String {
    let out = iterstore(&[
        "run",
        app,
        "--synthetic",
        "tiny",
        "--iters",
        "4",
        "-q",
        "--resume",
        dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "resumed anyway:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn a_corrupt_checkpoint_file_is_refused_with_its_name() {
    let dir = scratch("ckpt-corrupt");
    let ckpt = checkpointed(&dir, "pagerank");
    for file in ["shard-0.rows", "process-0.app"] {
        let path = ckpt.join(file);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let stderr = resume_fails("pagerank", &dir.join("ck"));
        assert!(stderr.contains(file), "{file} not named:\n{stderr}");
        bytes[at] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
    }
}

#[test]
fn another_apps_checkpoint_is_refused() {
    let dir = scratch("ckpt-other-app");
    checkpointed(&dir, "mf");
    let stderr = resume_fails("pagerank", &dir.join("ck"));
    assert!(
        stderr.contains("MANIFEST.json") && stderr.contains("mf"),
        "{stderr}"
    );
}

#[test]
fn bad_checkpoint_options_fail_before_any_work() {
    let dir = scratch("ckpt-options");
    let d = dir.to_str().unwrap().to_string();
    let missing = dir.join("missing").to_str().unwrap().to_string();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--checkpoint-every", "0", "--checkpoint-dir", &d],
            "--checkpoint-every",
        ),
        (&["--checkpoint-every", "2"], "--checkpoint-dir"),
        (&["--checkpoint-dir", &d], "--checkpoint-every"),
        (&["--resume", &missing], "missing"),
    ];
    for (extra, needle) in cases {
        // Not quiet: work would log its first step.
        let mut a = vec!["run", "mf", "--synthetic", "tiny"];
        a.extend(extra);
        let out = iterstore(&a);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} accepted");
        assert!(stderr.contains(needle), "{extra:?}: {stderr}");
        assert!(
            !stderr.contains("generating"),
            "{extra:?} did work: {stderr}"
        );
    }
    // A directory holding another run's checkpoint is refused up front, not midway.
    checkpointed(&dir, "mf");
    let ck = dir.join("ck").to_str().unwrap().to_string();
    let out = iterstore(&[
        "run",
        "mf",
        "--synthetic",
        "tiny",
        "-q",
        "--checkpoint-dir",
        &ck,
        "--checkpoint-every",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("already holds"),
        "{stderr}"
    );
}
