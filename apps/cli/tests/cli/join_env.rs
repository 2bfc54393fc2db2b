//! `iterstore run ... --join env`: processes started as `torchrun` and `srun` start them
//! (their environment simulated on loopback) form a cluster with no hosts file, and write
//! what one process of as many workers writes; a rank that never comes is named.

use std::path::Path;
use std::process::Command;

use crate::procs::{free_ports, tiny_output, write_secret, Proc, QUICK};
use crate::util::scratch;

/// Every variable a launcher may set that `--join env` reads: cleared in the children, so
/// that a test run under a real launcher simulates only the one it means to.
const LAUNCHER_VARS: [&str; 22] = [
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURMD_NODENAME",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "ITERSTORE_PORT",
    "ITERSTORE_RENDEZVOUS_PORT",
    "ITERSTORE_RENDEZVOUS_TIMEOUT",
    "ITERSTORE_SECRET",
    "ITERSTORE_LAUNCH_RANK",
];

/// `run pagerank` on the tiny graph, one worker per process, rank `rank` of the cluster
/// `env` describes, writing `--output` to `dir/name` (only rank 0 writes).
fn member(dir: &Path, name: &str, rank: usize, env: &[(&str, String)]) -> Proc {
    let out = dir.join(name);
    let secret = dir.join("secret");
    let args = [
        "run",
        "pagerank",
        "--synthetic",
        "tiny",
        "--iters",
        "3",
        "--mode",
        "generic",
        "--workers",
        "1",
        "-q",
        "--join",
        "env",
        "--secret-file",
        secret.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ];
    Proc::start(dir, &format!("rank{rank}"), &args, |c: &mut Command| {
        for var in LAUNCHER_VARS {
            c.env_remove(var);
        }
        c.envs(env.iter().map(|(k, v)| (k, v)));
    })
}

/// What one process of 2 workers writes for the same run.
fn one_process_of_two(dir: &Path) -> Vec<u8> {
    tiny_output(
        dir,
        "pagerank",
        "generic",
        "one-process.tsv",
        &["--workers", "2"],
    )
}

/// Runs the 2-process cluster whose rank `r` has the environment `env(r)`; rank 0's
/// output.
fn two_processes(dir: &Path, env: impl Fn(usize) -> Vec<(&'static str, String)>) -> Vec<u8> {
    write_secret(dir, "secret");
    let mut ranks: Vec<Proc> = (0..2)
        .map(|r| member(dir, &format!("rank{r}.tsv"), r, &env(r)))
        .collect();
    for p in &mut ranks {
        p.wait_ok(QUICK);
    }
    assert!(
        !dir.join("rank1.tsv").exists(),
        "rank 1 wrote --output (only rank 0 should)"
    );
    std::fs::read(dir.join("rank0.tsv")).unwrap()
}

#[test]
fn torchrun_environment_joins_without_a_hosts_file() {
    let dir = scratch("join-env-torchrun");
    let want = one_process_of_two(&dir);
    let port = free_ports(1)[0].to_string();
    let got = two_processes(&dir, |rank| {
        vec![
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", port.clone()),
            ("RANK", rank.to_string()),
            ("WORLD_SIZE", "2".into()),
            ("ITERSTORE_RENDEZVOUS_TIMEOUT", "30".into()),
        ]
    });
    assert!(
        got == want,
        "2 processes joined from torchrun's environment differ from 1 x 2"
    );
}

/// Two consecutive free ports on 127.0.0.1 (a node's two tasks listen on base and base+1).
fn consecutive_free_ports() -> u16 {
    for _ in 0..100 {
        let base = free_ports(1)[0];
        let both = (std::net::TcpListener::bind(("127.0.0.1", base)))
            .and_then(|a| std::net::TcpListener::bind(("127.0.0.1", base + 1)).map(|b| (a, b)));
        if base < u16::MAX && both.is_ok() {
            return base;
        }
    }
    panic!("no two consecutive free ports on 127.0.0.1");
}

#[test]
fn slurm_environment_joins_without_a_hosts_file() {
    let dir = scratch("join-env-slurm");
    let want = one_process_of_two(&dir);
    let base = consecutive_free_ports().to_string();
    let got = two_processes(&dir, |rank| {
        vec![
            ("SLURM_JOB_NODELIST", "127.0.0.1".into()),
            ("SLURM_TASKS_PER_NODE", "2".into()),
            ("SLURM_NTASKS", "2".into()),
            ("SLURM_PROCID", rank.to_string()),
            ("SLURM_LOCALID", rank.to_string()),
            ("ITERSTORE_PORT", base.clone()),
        ]
    });
    assert!(
        got == want,
        "2 processes joined from srun's environment differ from 1 x 2"
    );
}

#[test]
fn a_rank_that_never_comes_is_named() {
    let dir = scratch("join-env-missing");
    write_secret(&dir, "secret");
    let port = free_ports(1)[0].to_string();
    let env = [
        ("MASTER_ADDR", "127.0.0.1".to_string()),
        ("MASTER_PORT", port.clone()),
        ("RANK", "0".into()),
        ("WORLD_SIZE", "3".into()),
        ("ITERSTORE_RENDEZVOUS_TIMEOUT", "1".into()),
    ];
    let stderr = member(&dir, "out.tsv", 0, &env).wait_fails(QUICK);
    assert!(
        stderr.contains(&format!(
            "rendezvous at 127.0.0.1:{port} failed: ranks 1, 2 of 3 never arrived within 1 s"
        )),
        "{stderr}"
    );
    assert!(!dir.join("out.tsv").exists());
}
