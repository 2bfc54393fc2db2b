//! `iterstore run` as a cluster of processes over TCP on loopback: `--processes P` (the
//! launcher) and `--hosts/--rank/--secret-file` (processes started here, one by one).
//!
//! P processes of W workers must write the same bytes as one process of P*W workers under
//! BSP; a killed, stopped, misconfigured or missing peer must fail the others within
//! seconds, naming it; stray connections to a listening port must not disturb a run.
//!
//! Every child runs under a deadline and is killed when its [`Proc`] is dropped (also when
//! an assertion fails), so no test leaves processes behind. Children write their output
//! to files in the test's scratch directory, so a chatty child never blocks on a full pipe.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::util::scratch;

/// Generous bound for runs that should take well under a second (debug build, 2 cores).
pub(crate) const QUICK: Duration = Duration::from_secs(60);

/// A child `iterstore` process with its stdout and stderr in files; killed on drop.
pub(crate) struct Proc {
    label: String,
    child: Child,
    out: PathBuf,
    err: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `iterstore args...` with its output in `dir/label.{out,err}`; `configure`
    /// may adjust the command (its environment) before it is spawned.
    pub(crate) fn start(
        dir: &Path,
        label: &str,
        args: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_iterstore"));
        cmd.args(args);
        configure(&mut cmd);
        Proc::spawn(dir, label, cmd)
    }

    /// Spawns `cmd` (which runs `iterstore`, directly or through a wrapper such as
    /// `ip netns exec`) in `dir` with its output in `dir/label.{out,err}`.
    pub(crate) fn spawn(dir: &Path, label: &str, mut cmd: Command) -> Proc {
        let out = dir.join(format!("{label}.out"));
        let err = dir.join(format!("{label}.err"));
        cmd.current_dir(dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{label}: cannot start iterstore: {e}"));
        Proc {
            label: label.to_string(),
            child,
            out,
            err,
            status: None,
        }
    }

    pub(crate) fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    pub(crate) fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// The exit status if the process has ended.
    pub(crate) fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    /// Waits at most `limit` for the process to end; panics (and kills it) if it does not.
    pub(crate) fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.poll() {
                return status;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "{} still running after {limit:?}; stderr:\n{}",
                    self.label,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits at most `limit` for a successful exit; panics with the stderr otherwise.
    pub(crate) fn wait_ok(&mut self, limit: Duration) {
        let status = self.wait(limit);
        assert!(
            status.success(),
            "{} failed ({status}); stderr:\n{}",
            self.label,
            self.stderr()
        );
    }

    /// Waits at most `limit` for a failure; panics if the process succeeds or runs on.
    /// Returns the stderr.
    pub(crate) fn wait_fails(&mut self, limit: Duration) -> String {
        let status = self.wait(limit);
        let stderr = self.stderr();
        assert!(
            !status.success(),
            "{} should have failed; stderr:\n{stderr}",
            self.label
        );
        stderr
    }

    /// Waits at most `limit` until the stderr contains `needle`; panics if the process
    /// ends first or the time runs out.
    pub(crate) fn wait_for_stderr(&mut self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if self.stderr().contains(needle) {
                return;
            }
            if let Some(status) = self.poll() {
                panic!(
                    "{} ended ({status}) before logging {needle:?}; stderr:\n{}",
                    self.label,
                    self.stderr()
                );
            }
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "{} did not log {needle:?} within {limit:?}; stderr:\n{}",
                    self.label,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL (also ends a stopped process) and reap. A launcher killed so cannot remove
    /// its private directory: removed here, before the reap, while its pid (in the
    /// directory's name) is still this process's.
    pub(crate) fn kill(&mut self) {
        if self.poll().is_none() {
            let _ = self.child.kill();
            for dir in launcher_dirs(self.pid()) {
                let _ = std::fs::remove_dir_all(dir);
            }
            self.status = self.child.wait().ok();
        }
    }
}

/// The private directories (`iterstore-launch-<pid>-<nanos>` in the temporary directory)
/// of launchers that had process id `pid`.
fn launcher_dirs(pid: libc::pid_t) -> Vec<PathBuf> {
    let prefix = format!("iterstore-launch-{pid}-");
    std::fs::read_dir(std::env::temp_dir())
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `n` distinct ports that were free a moment ago (bound to 127.0.0.1:0 and released).
fn free_ports(n: usize) -> Vec<u16> {
    iterstore::loopback_hosts(n)
        .unwrap()
        .iter()
        .map(std::net::SocketAddr::port)
        .collect()
}

/// A cluster description in `dir`: a hosts file for `processes` ranks on loopback and a
/// secret file (mode 0600).
pub(crate) struct Cluster {
    pub(crate) ports: Vec<u16>,
    hosts: String,
    secret: String,
}

impl Cluster {
    pub(crate) fn new(dir: &Path, processes: usize) -> Cluster {
        let ports = free_ports(processes);
        let text: String = ports
            .iter()
            .enumerate()
            .map(|(r, p)| format!("{r} 127.0.0.1:{p}\n"))
            .collect();
        let hosts = dir.join("hosts");
        std::fs::write(&hosts, text).unwrap();
        let secret = write_secret(dir, "secret");
        Cluster {
            ports,
            hosts: hosts.to_str().unwrap().to_string(),
            secret,
        }
    }

    /// `run args... --hosts H --rank R --secret-file S`, started as `rank{R}`.
    pub(crate) fn start(&self, dir: &Path, rank: usize, args: &[&str]) -> Proc {
        self.start_with(dir, rank, args, &self.secret)
    }

    /// The arguments that make `iterstore` rank `rank` of this cluster.
    pub(crate) fn member_args(&self, rank: usize) -> Vec<String> {
        self.member_args_with(rank, &self.secret)
    }

    /// As [`Cluster::member_args`] with another secret file.
    fn member_args_with(&self, rank: usize, secret: &str) -> Vec<String> {
        let rank = rank.to_string();
        [
            "--hosts",
            &self.hosts,
            "--rank",
            &rank,
            "--secret-file",
            secret,
        ]
        .map(String::from)
        .to_vec()
    }

    /// As [`Cluster::start`] with another secret file.
    fn start_with(&self, dir: &Path, rank: usize, args: &[&str], secret: &str) -> Proc {
        let member = self.member_args_with(rank, secret);
        let mut all: Vec<&str> = args.to_vec();
        all.extend(member.iter().map(String::as_str));
        Proc::start(dir, &format!("rank{rank}"), &all, |c| {
            c.env_remove("ITERSTORE_SECRET");
        })
    }
}

/// A fresh random secret in `dir/name` (mode 0600); returns its path.
fn write_secret(dir: &Path, name: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bytes: [u8; 24] = rand::thread_rng().gen();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(name);
    std::fs::write(&path, hex + "\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_str().unwrap().to_string()
}

/// Runs `iterstore args...` in `dir` to a successful end (at most [`QUICK`]).
fn run_ok(dir: &Path, label: &str, args: &[&str]) -> Proc {
    let mut p = Proc::start(dir, label, args, |_| {});
    p.wait_ok(QUICK);
    p
}

/// `run APP --synthetic tiny --iters 3 --mode MODE` with `extra`, writing `--output` to
/// `dir/name`; returns the bytes written.
fn tiny_output(dir: &Path, app: &str, mode: &str, name: &str, extra: &[&str]) -> Vec<u8> {
    let out = dir.join(name);
    let mut args = vec![
        "run",
        app,
        "--synthetic",
        "tiny",
        "--iters",
        "3",
        "--mode",
        mode,
        "-q",
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    run_ok(dir, name, &args);
    let bytes = std::fs::read(&out).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(!bytes.is_empty(), "{name} is empty");
    bytes
}

/// Every app in every mode writes the same bytes as P processes of W workers as one
/// process of P x W workers, for `baseline` (the one process's `--workers`) and each of
/// `shapes` (`(processes, workers)`).
fn assert_shapes_write_the_same_bytes(name: &str, baseline: usize, shapes: &[(usize, usize)]) {
    let dir = scratch(name);
    for app in ["mf", "lda", "pagerank"] {
        for mode in ["generic", "first-iter", "virtual"] {
            let workers = baseline.to_string();
            let want = tiny_output(
                &dir,
                app,
                mode,
                &format!("{app}-{mode}-1x{baseline}"),
                &["--workers", &workers],
            );
            for &(p, w) in shapes {
                let (p, w) = (p.to_string(), w.to_string());
                let extra = ["--workers", &w, "--processes", &p];
                let got = tiny_output(&dir, app, mode, &format!("{app}-{mode}-{p}x{w}"), &extra);
                assert!(
                    got == want,
                    "{app} --mode {mode}: {p} processes x {w} workers differ from 1 x {baseline}"
                );
            }
        }
    }
}

#[test]
fn processes_write_the_same_bytes_as_threads() {
    assert_shapes_write_the_same_bytes("cluster-same-bytes", 2, &[(2, 1)]);
}

#[test]
fn four_processes_or_two_of_two_write_the_same_bytes_as_four_threads() {
    assert_shapes_write_the_same_bytes("cluster-same-bytes-4", 4, &[(4, 1), (2, 2)]);
}

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

/// The arguments of a run long enough to be interrupted mid-run.
pub(crate) const LONG_MF: [&str; 8] = [
    "run",
    "mf",
    "--synthetic",
    "small",
    "--iters",
    "1000",
    "--mode",
    "generic",
];

pub(crate) const JOINED: &str = "connected to every process";

/// Starts a 2-process long MF run and waits until both joined the cluster.
pub(crate) fn joined_pair(dir: &Path) -> (Cluster, Proc, Proc) {
    let cluster = Cluster::new(dir, 2);
    let mut r0 = cluster.start(dir, 0, &LONG_MF);
    let mut r1 = cluster.start(dir, 1, &LONG_MF);
    r0.wait_for_stderr(JOINED, QUICK);
    r1.wait_for_stderr(JOINED, QUICK);
    (cluster, r0, r1)
}

/// Whether `stderr` has a line starting with `prefix` that names the lost process 1 and
/// its address, in the one wording a lost peer gets whichever part of the process
/// noticed first (the network layer's event, or a send to the lost process).
fn names_lost_rank_1(stderr: &str, prefix: &str, addr: &str) -> bool {
    names_lost(stderr, prefix, 1, addr)
}

/// Whether `stderr` has a line starting with `prefix` that names the lost process `rank`
/// at `addr` (see [`names_lost_rank_1`]).
pub(crate) fn names_lost(stderr: &str, prefix: &str, rank: usize, addr: &str) -> bool {
    stderr.lines().any(|l| {
        l.starts_with(prefix)
            && l.contains(&format!("cluster failed: process {rank} at {addr}"))
            && l.contains("was lost")
    })
}

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
        e1.contains("proof does not verify (wrong or different secret)"),
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
    let hint = "every process must run with the same hosts, workers, shards, staleness, mode and specializations";
    // Both hellos cross on the wire; whichever side checks first refuses the other's
    // cluster id and closes, so only that side is sure to name it. Rank 1 dials rank 0
    // and reports the refusal as its error.
    let refusal = |e: &str| {
        e.lines().any(|l| {
            l.starts_with("iterstore: error:") && l.contains("cluster id") && l.contains(hint)
        })
    };
    assert!(
        refusal(&e0) || refusal(&e1),
        "no refusal with the hint; rank 0:\n{e0}\nrank 1:\n{e1}"
    );
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
    let e0 = r0.stderr();
    for port in stray_ports {
        assert!(
            e0.contains(&format!("peer=127.0.0.1:{port}")),
            "rank 0 did not log the stray connection from port {port}:\n{e0}"
        );
    }
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

/// The pids of `pid`'s children (Linux: `/proc/PID/task/*/children`).
pub(crate) fn children_of(pid: libc::pid_t) -> Vec<libc::pid_t> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let text =
            std::fs::read_to_string(task.unwrap().path().join("children")).unwrap_or_default();
        pids.extend(
            text.split_whitespace()
                .map(|p| p.parse::<libc::pid_t>().unwrap()),
        );
    }
    pids
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

/// The three apps run on several processes inside this test process (the in-process
/// transport, `Cluster::run_local_processes`): 2 processes of 2 workers and 4 of 1 give
/// exactly what one process of 4 workers gives, in every mode.
#[test]
fn every_app_on_local_processes_computes_what_one_process_of_as_many_workers_computes() {
    use iterstore::Cluster;
    use iterstore_apps::algo::lda::LdaConfig;
    use iterstore_apps::algo::mf::MfConfig;
    use iterstore_apps::apps::pagerank::PageRankParams;
    use iterstore_apps::apps::{lda, mf, pagerank, AppError};
    use iterstore_apps::data::{split_ratings, CorpusSpec, GraphSpec, RatingsSpec};

    let lift = |e: AppError| iterstore::Error::app(0, e);
    let (train, test) = split_ratings(&RatingsSpec::preset("tiny").unwrap().generate(), 0.1, 1);
    let (corpus, planted) = CorpusSpec::preset("tiny").unwrap().generate();
    let graph = GraphSpec::preset("tiny").unwrap().generate();
    let mfp = MfConfig::default();
    let ldap = LdaConfig {
        topics: planted.num_topics(),
        ..LdaConfig::default()
    };
    let prp = PageRankParams::default();
    let model_bytes = |m: &mf::MfOutcome| {
        let mut out = Vec::new();
        m.write_model(&mut out).unwrap();
        out
    };
    for mode in crate::util::MODES {
        let one = crate::util::bsp(mode, 4, 3);
        let mf_one = model_bytes(&mf::run(&one, &mfp, &train, &test.ratings).unwrap());
        let lda_one = lda::run(&one, &ldap, &corpus).unwrap().model;
        let pr_one = pagerank::run(&one, &prp, &graph).unwrap().ranks;
        for processes in [2, 4] {
            let cfg = crate::util::bsp(mode, 4 / processes, 3);
            let store = cfg.store_config();
            let got = Cluster::run_local_processes(store.clone(), processes, |c| {
                let m =
                    mf::run_in(c, &cfg, &mfp, &train, &test.ratings, &mut |_| {}).map_err(lift)?;
                Ok(model_bytes(&m))
            })
            .unwrap();
            assert!(
                got.iter().all(|m| *m == mf_one),
                "mf {mode:?} on {processes} processes"
            );
            let got = Cluster::run_local_processes(store.clone(), processes, |c| {
                lda::run_in(c, &cfg, &ldap, &corpus, &mut |_| {}).map_err(lift)
            })
            .unwrap();
            assert!(
                got.iter().all(|o| o.model == lda_one),
                "lda {mode:?} on {processes} processes"
            );
            let got = Cluster::run_local_processes(store, processes, |c| {
                pagerank::run_in(c, &cfg, &prp, &graph, &mut |_| {}).map_err(lift)
            })
            .unwrap();
            assert!(
                got.iter().all(|o| o.ranks == pr_one),
                "pagerank {mode:?} on {processes} processes"
            );
        }
    }
}

/// The layouts that give rows an owner (`--partition communities` for PageRank, `strata`
/// for MF) write the same bytes on 4 processes, or 2 of 2 workers, as one process of 4
/// workers, with locality placement on and off.
#[test]
fn owner_layouts_write_the_same_bytes_with_placement_on_and_off() {
    let dir = scratch("cluster-owner-layouts");
    for (app, partition) in [("pagerank", "communities"), ("mf", "strata")] {
        let base = ["--partition", partition, "--workers", "4"];
        let want = tiny_output(&dir, app, "virtual", &format!("{app}-1x4"), &base);
        for placement in ["on", "off"] {
            for (p, w) in [("4", "1"), ("2", "2")] {
                let extra = [
                    "--partition",
                    partition,
                    "--workers",
                    w,
                    "--processes",
                    p,
                    "--row-placement",
                    placement,
                ];
                let name = format!("{app}-{p}x{w}-placement-{placement}");
                let got = tiny_output(&dir, app, "virtual", &name, &extra);
                assert!(
                    got == want,
                    "{app} --partition {partition}: {name} differs from 1 x 4"
                );
            }
        }
    }
}
