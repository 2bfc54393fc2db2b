//! `iterstore run ... --restarts N`: a process of a 3-process cluster killed with SIGKILL
//! mid-run, and the run still ends as an uninterrupted one — under the launcher
//! (`--processes 3`, which starts the killed child again) and by hand (three `--rank R`
//! processes, the killed one started again by the test) — and what is not restarted: a
//! loss with `--restarts 0`, a second loss past N, a configuration error.
//!
//! Children are [`Proc`]s: bounded waits, killed on drop (a launcher's children die with
//! it).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::procs::{children_of, names_lost, Cluster, Proc, QUICK};
use crate::util::{json_file, scratch};

/// Bound for a whole run with a restart in it (debug build, shared cores).
const RUN: Duration = Duration::from_secs(240);

/// `run APP` on its test data, long enough (debug build) for a kill to land after the
/// first checkpoint and well before the end; one worker per process.
fn app_args(app: &'static str) -> Vec<&'static str> {
    let (size, iters) = match app {
        "pagerank" => ("small", "200"),
        "mf" => ("tiny", "400"),
        "lda" => ("small", "150"),
        other => panic!("no restart test for {other}"),
    };
    vec![
        "run",
        app,
        "--synthetic",
        size,
        "--iters",
        iters,
        "--workers",
        "1",
    ]
}

/// Whether `dir` holds a complete checkpoint (a `ckpt-*` with its manifest).
fn has_checkpoint(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.path().join("MANIFEST.json").exists())
    })
}

/// Waits (bounded) until `dir` holds a complete checkpoint, while `p` runs.
fn wait_checkpoint(p: &mut Proc, dir: &Path) {
    let deadline = Instant::now() + RUN;
    while !has_checkpoint(dir) {
        assert!(
            p.poll().is_none() && Instant::now() < deadline,
            "no checkpoint in {} while it ran; stderr:\n{}",
            dir.display(),
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until `p` logs a line starting with `prefix` that contains `needle`.
fn wait_line(p: &mut Proc, prefix: &str, needle: &str) {
    let deadline = Instant::now() + RUN;
    while !p
        .stderr()
        .lines()
        .any(|l| l.starts_with(prefix) && l.contains(needle))
    {
        assert!(
            p.poll().is_none() && Instant::now() < deadline,
            "no line {prefix}...{needle} while it ran; stderr:\n{}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The command line of process `pid`, arguments separated by spaces.
fn cmdline(pid: libc::pid_t) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// SIGKILLs the launcher's child of rank `rank`; panics if it has none (the run ended).
fn kill_child(launcher: &mut Proc, rank: usize) {
    let pid = children_of(launcher.pid())
        .into_iter()
        .find(|&p| cmdline(p).contains(&format!(" --rank {rank} ")))
        .unwrap_or_else(|| {
            panic!(
                "the launcher has no child of rank {rank} to kill; stderr:\n{}",
                launcher.stderr()
            )
        });
    // SAFETY: kill(2) on a live child of our own child, found just above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

/// `app_args(app)` plus `extra`, writing `--output` to `dir/name`, on 3 local processes
/// (progress shown: one line per iteration, the output being a file).
fn launched(dir: &Path, app: &'static str, name: &str, extra: &[&str]) -> Proc {
    let out = dir.join(name);
    let mut args = app_args(app);
    args.extend(["--processes", "3", "--output", out.to_str().unwrap()]);
    args.extend(extra);
    Proc::start(dir, name, &args, |_| {})
}

/// The output of an uninterrupted 3-process run of `app`.
fn uninterrupted(dir: &Path, app: &'static str) -> Vec<u8> {
    let mut p = launched(dir, app, "plain", &[]);
    p.wait_ok(RUN);
    std::fs::read(dir.join("plain")).unwrap()
}

/// The checkpoints of a run killed in [`a_killed_child_is_restarted`].
#[derive(Debug, Clone, Copy)]
enum Checkpoints {
    /// Every so many iterations; the kill comes after the first.
    Every(&'static str),
    /// A checkpoint directory, but the kill comes before any checkpoint is due.
    NoneYet,
    /// No checkpoint directory.
    NoDir,
    /// No checkpoint directory, two copies of every shard (`--shard-replicas 2`): the
    /// cluster goes on from the replicas.
    Replicas,
}

/// The launcher with `--restarts 1` and `checkpoints`: rank 2 killed once there is a
/// checkpoint (or, without one, after iteration 3), and the run ends with the
/// uninterrupted output and one restart in its JSON.
fn a_killed_child_is_restarted(app: &'static str, checkpoints: Checkpoints) {
    let dir = scratch(&format!("restarts-launcher-{app}-{checkpoints:?}"));
    let expected = uninterrupted(&dir, app);
    let ck = dir.join("ck");
    let json = dir.join("report.json");
    let mut extra = vec!["--restarts", "1", "--json", json.to_str().unwrap()];
    let every = match checkpoints {
        Checkpoints::Every(every) => Some(every),
        Checkpoints::NoneYet => Some("100000"),
        Checkpoints::NoDir | Checkpoints::Replicas => None,
    };
    let replicated = matches!(checkpoints, Checkpoints::Replicas);
    if replicated {
        extra.extend(["--shard-replicas", "2"]);
    }
    if let Some(every) = every {
        extra.extend(["--checkpoint-dir", ck.to_str().unwrap()]);
        extra.extend(["--checkpoint-every", every]);
    }
    let mut run = launched(&dir, app, "restarted", &extra);
    let checkpointed = matches!(checkpoints, Checkpoints::Every(_));
    if checkpointed {
        wait_checkpoint(&mut run, &ck);
    } else {
        wait_line(&mut run, "[rank 0] ", &format!("{app}: iteration 3/"));
    }
    kill_child(&mut run, 2);
    run.wait_ok(RUN);
    let stderr = run.stderr();
    assert!(
        stderr.contains("process 2 died (signal: 9 (SIGKILL)); starting it again in 1 s"),
        "{stderr}"
    );
    assert!(stderr.contains("restart 1 of 1: rejoining"), "{stderr}");
    assert!(
        std::fs::read(dir.join("restarted")).unwrap() == expected,
        "{app}: the restarted run's output differs from the uninterrupted one; stderr:\n{stderr}"
    );
    let report = json_file(&json);
    let restarts = report["restarts"].as_array().expect("restarts in the JSON");
    assert_eq!(restarts.len(), 1, "{report:#}");
    // Rank 0 noticed rank 2's loss, or rank 1 leaving on noticing it (its connection
    // closed, or a shard saw it leave mid-collective).
    let lost = restarts[0]["lost"].as_u64().unwrap();
    assert!(lost == 1 || lost == 2, "{:#}", restarts[0]);
    let error = restarts[0]["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("process {lost} at 127.0.0.1:")) && error.contains("was lost")
            || error.contains(&format!("process {lost} left the cluster ")),
        "{:#}",
        restarts[0]
    );
    if checkpointed {
        assert!(restarts[0]["resumed_from_clock"].as_u64().is_some());
        assert!(report["resumed"]["checkpoint"].is_string(), "{report:#}");
    } else if replicated {
        // From the replicas (no checkpoint was read or written), past iteration 2: the
        // kill follows rank 0's line of iteration 3, which it prints before the processes
        // keep their states of that iteration.
        let from = report["resumed"]["checkpoint"].as_str().unwrap_or_default();
        assert!(
            from.starts_with("the replicated shards at clock"),
            "{report:#}"
        );
        assert!(
            report["resumed"]["iteration"].as_u64() >= Some(2),
            "{report:#}"
        );
        assert!(stderr.contains("from the replicated shards"), "{stderr}");
        assert!(!ck.exists());
    } else {
        assert!(restarts[0]["resumed_from_clock"].is_null());
        assert!(report["resumed"].is_null(), "{report:#}");
    }
}

#[test]
fn pagerank_survives_a_killed_process_with_the_same_output() {
    a_killed_child_is_restarted("pagerank", Checkpoints::Every("20"));
}

#[test]
fn mf_survives_a_killed_process_with_the_same_output() {
    a_killed_child_is_restarted("mf", Checkpoints::Every("40"));
}

#[test]
fn lda_survives_a_killed_process_with_the_same_output() {
    a_killed_child_is_restarted("lda", Checkpoints::Every("15"));
}

#[test]
fn pagerank_with_replicated_shards_goes_on_from_the_replicas_with_the_same_output() {
    a_killed_child_is_restarted("pagerank", Checkpoints::Replicas);
}

#[test]
fn mf_with_replicated_shards_goes_on_from_the_replicas_with_the_same_output() {
    a_killed_child_is_restarted("mf", Checkpoints::Replicas);
}

#[test]
fn without_a_checkpoint_yet_a_restart_starts_from_the_beginning() {
    a_killed_child_is_restarted("pagerank", Checkpoints::NoneYet);
}

#[test]
fn without_a_checkpoint_directory_a_restart_starts_from_the_beginning() {
    a_killed_child_is_restarted("pagerank", Checkpoints::NoDir);
}

#[test]
fn with_no_restarts_a_lost_process_fails_the_run_naming_it() {
    let dir = scratch("restarts-none");
    let ck = dir.join("ck");
    let mut run = launched(
        &dir,
        "pagerank",
        "out",
        &[
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "--checkpoint-every",
            "20",
        ],
    );
    wait_checkpoint(&mut run, &ck);
    kill_child(&mut run, 2);
    let stderr = run.wait_fails(Duration::from_secs(30));
    assert!(
        names_lost(&stderr, "[rank 0] iterstore: error:", 2, "127.0.0.1:")
            || names_lost(&stderr, "[rank 1] iterstore: error:", 2, "127.0.0.1:"),
        "no survivor named the lost process 2:\n{stderr}"
    );
    assert!(
        stderr.contains("iterstore: error: process 2 of 3 failed (signal: 9"),
        "{stderr}"
    );
    // (Not "restart": the checkpoint directory's path, which an error may name, has it.)
    assert!(!stderr.contains("restart 1 of"), "{stderr}");
    if stderr.contains("is intact") {
        // Lost during a checkpoint: the advice is to resume, not to make room.
        assert!(!stderr.contains("make room"), "{stderr}");
    }
    assert!(!dir.join("out").exists(), "a failed run wrote its output");
}

#[test]
fn a_second_loss_past_the_restarts_fails_saying_they_are_exhausted() {
    let dir = scratch("restarts-exhausted");
    let out = dir.join("out");
    // Progress shown (not -q): the test waits for the restarted rank to join.
    let mut args = vec!["run", "mf", "--synthetic", "tiny", "--iters", "100000"];
    args.extend(["--workers", "1", "--processes", "3", "--restarts", "1"]);
    args.extend(["--output", out.to_str().unwrap()]);
    let mut run = Proc::start(&dir, "launcher", &args, |_| {});
    // How often the rank that joined least has joined: rank 2 is killed only once every
    // rank has joined (killed while the others still join, the rejoin itself fails).
    let joined = |run: &Proc| {
        let stderr = run.stderr();
        (0..3)
            .map(|r| {
                let rank = format!("[rank {r}] ");
                stderr
                    .lines()
                    .filter(|l| l.starts_with(&rank) && l.contains("connected to every process"))
                    .count()
            })
            .min()
            .unwrap_or(0)
    };
    for times in 1..=2 {
        let deadline = Instant::now() + RUN;
        while joined(&run) < times {
            assert!(
                run.poll().is_none() && Instant::now() < deadline,
                "the ranks did not all join {times} time(s); stderr:\n{}",
                run.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        kill_child(&mut run, 2);
    }
    let stderr = run.wait_fails(Duration::from_secs(60));
    assert!(
        stderr.contains("the 1 restart(s) of --restarts 1 are exhausted"),
        "{stderr}"
    );
    assert!(
        stderr.contains("iterstore: error: process 2 of 3 failed (signal: 9"),
        "{stderr}"
    );
    assert!(!out.exists(), "a failed run wrote its output");
}

#[test]
fn a_cluster_started_by_hand_rejoins_a_rank_started_again() {
    let dir = scratch("restarts-by-hand");
    let expected = uninterrupted(&dir, "lda");
    let cluster = Cluster::new(&dir, 3);
    let ck = dir.join("ck");
    let out = dir.join("out");
    let mut args = app_args("lda");
    args.extend(["-q", "--restarts", "1", "--output", out.to_str().unwrap()]);
    args.extend(["--checkpoint-dir", ck.to_str().unwrap()]);
    args.extend(["--checkpoint-every", "15"]);
    let mut ranks: Vec<Proc> = (0..3).map(|r| cluster.start(&dir, r, &args)).collect();
    wait_checkpoint(&mut ranks[0], &ck);
    ranks[2].kill();
    // Started again as an operator would: the same command.
    let member = cluster.member_args(2);
    let mut again = args.clone();
    again.extend(member.iter().map(String::as_str));
    ranks[2] = Proc::start(&dir, "rank2-again", &again, |c| {
        c.env_remove("ITERSTORE_SECRET");
    });
    for r in &mut ranks {
        r.wait_ok(RUN);
    }
    for (r, survivor) in ranks.iter().enumerate().take(2) {
        let stderr = survivor.stderr();
        assert!(
            stderr.contains(&format!("process {r} lost process ")),
            "rank {r}:\n{stderr}"
        );
        assert!(
            stderr.contains(
                "restart 1 of 1: rejoining the cluster; it continues from checkpoint clock"
            ),
            "rank {r}:\n{stderr}"
        );
    }
    assert!(
        ranks[2].stdout().contains("checkpoints: resumed from"),
        "the restarted rank did not resume:\n{}",
        ranks[2].stdout()
    );
    assert!(
        std::fs::read(&out).unwrap() == expected,
        "the output differs from the uninterrupted run's"
    );
}

#[test]
fn a_configuration_error_is_not_restarted() {
    let dir = scratch("restarts-config");
    let cluster = Cluster::new(&dir, 3);
    let mut ranks: Vec<Proc> = (0..3)
        .map(|r| {
            // Rank 2 runs more iterations than the others.
            let iters = if r == 2 { "201" } else { "200" };
            let mut args = vec!["run", "pagerank", "--synthetic", "small", "--iters", iters];
            args.extend(["--workers", "1", "-q", "--restarts", "3"]);
            cluster.start(&dir, r, &args)
        })
        .collect();
    let started = Instant::now();
    for (r, p) in ranks.iter_mut().enumerate() {
        let stderr = p.wait_fails(QUICK);
        assert!(stderr.contains("--iters differs"), "rank {r}:\n{stderr}");
        assert!(!stderr.contains("restart"), "rank {r}:\n{stderr}");
    }
    // Failed at once (before the first iteration), not after a backoff and a wait for processes that will not rejoin.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn survivors_waiting_for_a_rank_that_never_returns_fail_after_the_connect_timeout() {
    let dir = scratch("restarts-never-back");
    let cluster = Cluster::new(&dir, 3);
    let mut args = vec!["run", "lda", "--synthetic", "small", "--iters", "100000"];
    args.extend([
        "--workers",
        "1",
        "--restarts",
        "1",
        "--connect-timeout",
        "3",
    ]);
    let mut ranks: Vec<Proc> = (0..3).map(|r| cluster.start(&dir, r, &args)).collect();
    wait_line(&mut ranks[0], "", "lda: iteration 3/");
    ranks[2].kill();
    let killed = Instant::now();
    let errors: Vec<String> = ranks[..2]
        .iter_mut()
        .map(|r| r.wait_fails(Duration::from_secs(30)))
        .collect();
    // The 1 s backoff, the 3 s connect timeout, and slack for a loaded machine.
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "{:?}",
        killed.elapsed()
    );
    for (r, stderr) in errors.iter().enumerate() {
        // Rank 1 may have noticed rank 0 leaving before rank 2's loss.
        assert!(
            stderr.contains("iterstore: error: restart 1 of 1 (after process ")
                && stderr.contains(&format!(
                    "parameter server: joining the cluster as process {r} of 3 failed: "
                )),
            "rank {r}:\n{stderr}"
        );
    }
    // The first to time out names the missing rank; the other may see it leave first.
    assert!(
        errors
            .iter()
            .any(|e| e.contains("not every peer connected within 3s; missing: rank 2")),
        "no survivor named the missing rank 2:\n{}",
        errors.join("\n")
    );
}
