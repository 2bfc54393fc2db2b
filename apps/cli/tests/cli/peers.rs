//! Processes started one by one (`--hosts/--rank/--secret-file`): a killed, stopped,
//! misconfigured or missing peer must fail the others within seconds, naming it; stray
//! connections to a listening port must not disturb a run.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use rand::Rng;

use crate::procs::{
    joined_pair, names_lost_rank_1, run_ok, write_secret, Cluster, Proc, JOINED, QUICK,
};
use crate::util::scratch;

#[test]
fn a_killed_peer_fails_the_other_naming_it() {
    let dir = scratch("cluster-kill");
    let (cluster, mut r0, mut r1) = joined_pair(&dir);
    std::thread::sleep(Duration::from_millis(300));
    r1.kill();
    let stderr = r0.wait_fails(Duration::from_secs(10));
    let addr = format!("127.0.0.1:{}", cluster.ports[1]);
    assert!(
        names_lost_rank_1(&stderr, "iterstore: error:", &addr),
        "rank 0 did not name the lost process 1 at {addr}:\n{stderr}"
    );
}

#[test]
fn a_stopped_peer_fails_the_other_after_the_heartbeat_timeout() {
    let dir = scratch("cluster-stop");
    let (cluster, mut r0, mut r1) = joined_pair(&dir);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the pid of a child we own and have not reaped.
    assert_eq!(unsafe { libc::kill(r1.pid(), libc::SIGSTOP) }, 0);
    let stopped = Instant::now();
    let stderr = r0.wait_fails(Duration::from_secs(10));
    let took = stopped.elapsed();
    r1.kill();
    let addr = format!("127.0.0.1:{}", cluster.ports[1]);
    assert!(
        names_lost_rank_1(&stderr, "iterstore: error:", &addr),
        "rank 0 did not name the lost process 1 at {addr}:\n{stderr}"
    );
    assert!(stderr.contains("silent for"), "{stderr}");
    // The default heartbeat timeout is 5 s: not lost sooner (r1 was healthy).
    assert!(took >= Duration::from_secs(4), "lost after only {took:?}");
}

/// Two tiny runs with `--connect-timeout 3`, rank 0 with one worker, rank 1 with
/// `rank1_workers` and its own secret file; returns both stderrs once both failed.
fn refused_pair(dir: &Path, rank1_workers: &str, rank1_secret: Option<&str>) -> (String, String) {
    let cluster = Cluster::new(dir, 2);
    let base = [
        "run",
        "mf",
        "--synthetic",
        "tiny",
        "--iters",
        "3",
        "--connect-timeout",
        "3",
        "--workers",
    ];
    let (mut args0, mut args1) = (base.to_vec(), base.to_vec());
    args0.push("1");
    args1.push(rank1_workers);
    let mut r0 = cluster.start(dir, 0, &args0);
    let mut r1 = cluster.start_with(dir, 1, &args1, rank1_secret.unwrap_or(&cluster.secret));
    let e0 = r0.wait_fails(Duration::from_secs(15));
    let e1 = r1.wait_fails(Duration::from_secs(15));
    (e0, e1)
}

#[test]
fn a_wrong_secret_is_refused() {
    let dir = scratch("cluster-secret");
    let other = write_secret(&dir, "other-secret");
    let (e0, e1) = refused_pair(&dir, "1", Some(&other));
    assert!(
        e1.contains("refused it (wrong or different secret"),
        "rank 1:\n{e1}"
    );
    assert!(e0.contains("missing: rank 1"), "rank 0:\n{e0}");
    // The secret itself is never shown.
    let secret = std::fs::read_to_string(dir.join("secret")).unwrap();
    let other = std::fs::read_to_string(&other).unwrap();
    for s in [secret.trim(), other.trim()] {
        assert!(!e0.contains(s) && !e1.contains(s), "a secret was printed");
    }
}

#[test]
fn different_settings_are_refused() {
    let dir = scratch("cluster-mismatch");
    let (e0, e1) = refused_pair(&dir, "2", None);
    // Both processes connect (the handshake covers the protocol and the hosts), then
    // agree on the store settings by name: both fail naming the one that differs.
    for e in [&e0, &e1] {
        assert!(
            e.lines().any(|l| l.starts_with("iterstore: error:")
                && l.contains("workers differs (rank 0: 1; rank 1: 2)")),
            "rank 0:\n{e0}\nrank 1:\n{e1}"
        );
    }
    assert!(
        !e0.contains("proof does not verify") && !e1.contains("proof does not verify"),
        "a settings mismatch reported as a secret mismatch"
    );
}

#[test]
fn garbage_on_the_port_does_not_disturb_a_run() {
    let dir = scratch("cluster-garbage");
    let want = {
        let out = dir.join("want.txt");
        run_ok(
            &dir,
            "single",
            &[
                "run",
                "lda",
                "--synthetic",
                "small",
                "--iters",
                "30",
                "-q",
                "--workers",
                "2",
                "--output",
                out.to_str().unwrap(),
            ],
        );
        std::fs::read(out).unwrap()
    };
    let cluster = Cluster::new(&dir, 2);
    let run = |rank: usize| {
        let out = dir.join(format!("got{rank}.txt"));
        let args = [
            "run",
            "lda",
            "--synthetic",
            "small",
            "--iters",
            "30",
            "--workers",
            "1",
            "--output",
            out.to_str().unwrap(),
        ];
        cluster.start(&dir, rank, &args)
    };
    let (mut r0, mut r1) = (run(0), run(1));
    r0.wait_for_stderr(JOINED, QUICK);
    r1.wait_for_stderr(JOINED, QUICK);

    let addr = ("127.0.0.1", cluster.ports[0]);
    let mut random = TcpStream::connect(addr).unwrap();
    let mut noise = vec![0u8; 4096];
    rand::thread_rng().fill(&mut noise[..]);
    // The peer may close on the first bad bytes: a failed write is fine.
    let _ = random.write_all(&noise);
    let mut huge = TcpStream::connect(addr).unwrap();
    let _ = huge.write_all(&u32::MAX.to_le_bytes());
    let silent = TcpStream::connect(addr).unwrap();
    // The right magic, then half a hello, then nothing: a handshake that never ends.
    let mut partial = TcpStream::connect(addr).unwrap();
    partial.write_all(b"ISNt\x01\x00\x00\x00\x2a").unwrap();
    let stray_ports = [&random, &huge].map(|s| s.local_addr().unwrap().port());

    r0.wait_ok(QUICK);
    r1.wait_ok(QUICK);
    // Rank 0 closed the stray connections that sent garbage (it may first send its
    // handshake greeting).
    for (what, mut s) in [("random bytes", random), ("huge length", huge)] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        match s.read_to_end(&mut got) {
            Ok(_) | Err(_) if got.len() < 4096 => {}
            r => panic!("{what}: connection not closed ({r:?}, {} bytes)", got.len()),
        }
    }
    drop((silent, partial));
    let got = std::fs::read(dir.join("got0.txt")).unwrap();
    assert!(got == want, "the disturbed run's output differs");
    assert!(
        !dir.join("got1.txt").exists(),
        "rank 1 wrote --output (only rank 0 should)"
    );
    // Warnings about strangers are rate-limited (one per 5 s, with the count held back):
    // the first stray connection is named, the flood is not echoed line by line.
    let e0 = r0.stderr();
    assert!(
        stray_ports
            .iter()
            .any(|port| e0.contains(&format!("peer=127.0.0.1:{port}"))),
        "rank 0 logged none of the stray connections {stray_ports:?}:\n{e0}"
    );
    let strangers = e0
        .lines()
        .filter(|l| l.contains("iterstore net:") && l.contains("WARN"))
        .count();
    assert!(
        strangers <= 2,
        "{strangers} warnings about strangers:\n{e0}"
    );
}

#[test]
fn a_peer_that_never_starts_fails_the_start_up() {
    let dir = scratch("cluster-missing");
    let cluster = Cluster::new(&dir, 2);
    let mut r0 = cluster.start(
        &dir,
        0,
        &[
            "run",
            "pagerank",
            "--synthetic",
            "tiny",
            "--iters",
            "3",
            "--connect-timeout",
            "2",
        ],
    );
    let stderr = r0.wait_fails(Duration::from_secs(6));
    let want = format!("missing: rank 1 at 127.0.0.1:{}", cluster.ports[1]);
    assert!(stderr.contains(&want), "{want:?} not in:\n{stderr}");
    assert!(stderr.contains("within 2s"), "{stderr}");
}

#[test]
fn hosts_without_a_secret_fails_before_connecting() {
    let dir = scratch("cluster-no-secret");
    let cluster = Cluster::new(&dir, 2);
    let mut p = Proc::start(
        &dir,
        "rank0",
        &[
            "run",
            "pagerank",
            "--synthetic",
            "tiny",
            "--iters",
            "3",
            "--hosts",
            &cluster.hosts,
            "--rank",
            "0",
        ],
        |c| {
            c.env_remove("ITERSTORE_SECRET");
        },
    );
    let stderr = p.wait_fails(QUICK);
    assert!(
        stderr.contains("--secret-file") && stderr.contains("ITERSTORE_SECRET"),
        "{stderr}"
    );
    assert!(!stderr.contains("joining the cluster"), "{stderr}");
}
