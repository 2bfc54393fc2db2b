//! The harness of the multi-process tests: `iterstore` children ([`Proc`]) and cluster
//! descriptions ([`Cluster`]: a hosts file and a secret) on loopback.
//!
//! Every child runs under a deadline and is killed when its [`Proc`] is dropped (also when
//! an assertion fails), so no test leaves processes behind. Children write their output
//! to files in the test's scratch directory, so a chatty child never blocks on a full pipe.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;

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
pub(crate) fn launcher_dirs(pid: libc::pid_t) -> Vec<PathBuf> {
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
pub(crate) fn free_ports(n: usize) -> Vec<u16> {
    iterstore::deploy::loopback_hosts(n)
        .unwrap()
        .iter()
        .map(std::net::SocketAddr::port)
        .collect()
}

/// A cluster description in `dir`: a hosts file for `processes` ranks on loopback and a
/// secret file (mode 0600).
pub(crate) struct Cluster {
    pub(crate) ports: Vec<u16>,
    pub(crate) hosts: String,
    pub(crate) secret: String,
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
    pub(crate) fn member_args_with(&self, rank: usize, secret: &str) -> Vec<String> {
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
    pub(crate) fn start_with(&self, dir: &Path, rank: usize, args: &[&str], secret: &str) -> Proc {
        let member = self.member_args_with(rank, secret);
        let mut all: Vec<&str> = args.to_vec();
        all.extend(member.iter().map(String::as_str));
        Proc::start(dir, &format!("rank{rank}"), &all, |c| {
            c.env_remove("ITERSTORE_SECRET");
        })
    }
}

/// A fresh random secret in `dir/name` (mode 0600); returns its path.
pub(crate) fn write_secret(dir: &Path, name: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bytes: [u8; 24] = rand::thread_rng().gen();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(name);
    std::fs::write(&path, hex + "\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_str().unwrap().to_string()
}

/// Runs `iterstore args...` in `dir` to a successful end (at most [`QUICK`]).
pub(crate) fn run_ok(dir: &Path, label: &str, args: &[&str]) -> Proc {
    let mut p = Proc::start(dir, label, args, |_| {});
    p.wait_ok(QUICK);
    p
}

/// `run APP --synthetic tiny --iters 3 --mode MODE` with `extra`, writing `--output` to
/// `dir/name`; returns the bytes written.
pub(crate) fn tiny_output(
    dir: &Path,
    app: &str,
    mode: &str,
    name: &str,
    extra: &[&str],
) -> Vec<u8> {
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
pub(crate) fn names_lost_rank_1(stderr: &str, prefix: &str, addr: &str) -> bool {
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
