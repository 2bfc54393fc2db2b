//! The launcher (`iterstore run ... --processes P`): it prefixes its children's output by
//! rank and only rank 0 writes files; interrupted, it stops its children and leaves
//! nothing behind; it fails with the worst child's status.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::procs::{
    children_of, launcher_dirs, names_lost_rank_1, run_ok, Proc, JOINED, LONG_MF, QUICK,
};
use crate::util::scratch;

#[test]
fn launcher_prefixes_output_by_rank_and_only_rank_0_writes_files() {
    let dir = scratch("cluster-launcher");
    let (json, output) = (dir.join("report.json"), dir.join("ranks.tsv"));
    let p = run_ok(
        &dir,
        "launcher",
        &[
            "run",
            "pagerank",
            "--synthetic",
            "tiny",
            "--iters",
            "3",
            "--workers",
            "1",
            "--processes",
            "2",
            "--json",
            json.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ],
    );
    let stdout = p.stdout();
    for rank in 0..2 {
        let prefix = format!("[rank {rank}] ");
        assert!(
            stdout.lines().any(|l| l.starts_with(&prefix)),
            "no line prefixed {prefix:?} in stdout:\n{stdout}"
        );
    }
    assert!(
        stdout.lines().all(|l| l.starts_with("[rank ")),
        "a line without a rank prefix in stdout:\n{stdout}"
    );
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(text.starts_with('{'), "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let command = report["command_line"].as_str().unwrap();
    assert!(
        command.contains("--rank 0 "),
        "the report is not rank 0's: {command}"
    );
    assert_eq!(report["processes"], 2);
    // Every iteration's run crossed the network, and the report says how much (summed
    // over both processes).
    let iterations = report["iterations"].as_array().unwrap();
    assert!(!iterations.is_empty());
    for it in iterations {
        assert!(it["bytes_sent"].as_u64().unwrap() > 0, "{it}");
        assert!(it["messages_sent"].as_u64().unwrap() >= 2, "{it}");
    }
    assert!(report["store"]["bytes_received"].as_u64().unwrap() > 0);
    // What the bytes were spent on, by kind of message.
    let kinds: Vec<&str> = report["traffic"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    for kind in ["Clock", "RunEnd", "RunReady", "SlabRows"] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    assert!(std::fs::metadata(&output).unwrap().len() > 0);
    // Nothing else was written next to them (no per-rank copies).
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["launcher.err", "launcher.out", "ranks.tsv", "report.json"]
    );
}

/// The command line of process `pid`, arguments separated by spaces.
fn cmdline(pid: libc::pid_t) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Waits (bounded) until a 2-process launcher's ranks both logged that they joined.
fn wait_until_both_ranks_joined(launcher: &mut Proc) {
    for rank in 0..2 {
        let deadline = Instant::now() + QUICK;
        while !launcher
            .stderr()
            .lines()
            .any(|l| l.starts_with(&format!("[rank {rank}] ")) && l.contains(JOINED))
        {
            assert!(
                launcher.poll().is_none() && Instant::now() < deadline,
                "rank {rank} did not join; stderr:\n{}",
                launcher.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn an_interrupted_launcher_stops_its_children_and_leaves_nothing_behind() {
    let dir = scratch("cluster-launcher-interrupt");
    let before: Vec<PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let mut args = LONG_MF.to_vec();
    args.extend(["--workers", "1", "--processes", "2"]);
    let mut launcher = Proc::start(&dir, "launcher", &args, |_| {});
    wait_until_both_ranks_joined(&mut launcher);
    let children = children_of(launcher.pid());
    // Its own directory: the one named with its pid that did not exist before it started
    // (an earlier launcher with the same pid, killed where it could not clean up, may
    // have left one).
    let mut own = launcher_dirs(launcher.pid());
    own.retain(|d| !before.contains(d));
    assert_eq!(
        own.len(),
        1,
        "the launcher's directory while it runs: {own:?}"
    );
    // SAFETY: kill(2) on our own child, which has not been reaped.
    assert_eq!(unsafe { libc::kill(launcher.pid(), libc::SIGINT) }, 0);
    let stderr = launcher.wait_fails(Duration::from_secs(10));
    assert!(stderr.contains("iterstore: error: interrupted"), "{stderr}");
    for pid in children {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "child {pid} outlived the launcher"
        );
    }
    assert!(
        !own[0].exists(),
        "the launcher left its directory (and secret) behind: {}",
        own[0].display()
    );
}

#[test]
fn launcher_fails_with_the_worst_child_and_leaves_none_behind() {
    let dir = scratch("cluster-launcher-kill");
    let mut args = LONG_MF.to_vec();
    args.extend(["--workers", "1", "--processes", "2"]);
    let mut launcher = Proc::start(&dir, "launcher", &args, |_| {});
    wait_until_both_ranks_joined(&mut launcher);
    let children = children_of(launcher.pid());
    assert_eq!(children.len(), 2, "children {children:?}");
    let rank1 = *children
        .iter()
        .find(|&&p| cmdline(p).contains(" --rank 1 "))
        .expect("a child with --rank 1");
    // SAFETY: kill(2) on a live child of our own child, found just above.
    assert_eq!(unsafe { libc::kill(rank1, libc::SIGKILL) }, 0);
    let stderr = launcher.wait_fails(Duration::from_secs(15));
    assert!(
        names_lost_rank_1(&stderr, "[rank 0] iterstore: error:", "127.0.0.1:"),
        "rank 0 did not name the lost process 1:\n{stderr}"
    );
    assert!(
        stderr.contains("iterstore: error: process 1 of 2 failed"),
        "{stderr}"
    );
    for pid in children {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "child {pid} outlived the launcher"
        );
    }
}

#[test]
fn launcher_exit_status_is_a_failed_childs() {
    let dir = scratch("cluster-launcher-status");
    let mut p = Proc::start(
        &dir,
        "launcher",
        &[
            "run",
            "pagerank",
            "--data",
            "missing.tsv",
            "--processes",
            "2",
            "-q",
        ],
        |_| {},
    );
    let stderr = p.wait_fails(QUICK);
    for rank in 0..2 {
        assert!(
            stderr.contains(&format!("[rank {rank}] iterstore: error: missing.tsv")),
            "{stderr}"
        );
    }
    assert!(stderr.contains(" of 2 failed (exit status: 1)"), "{stderr}");
}
