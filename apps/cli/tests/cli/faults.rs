//! Faults injected from outside the processes, each ending in a clear error or a
//! completed run, never a hang: a connection reset under a running cluster (`ss -K`), a
//! link that goes silent (loopback taken down inside a network namespace), a disk that
//! fills up while a checkpoint is written (a small tmpfs), and a slow reader (a process
//! stopped for less than the heartbeat timeout while the other sends to it).
//!
//! All but the slow reader need root (`CAP_NET_ADMIN`, `CAP_SYS_ADMIN`); without it they
//! print why they are skipped. Everything they create (namespaces, mounts, processes) is removed when the
//! test ends, also when an assertion fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::procs::{joined_pair, names_lost, Cluster, Proc, JOINED, LONG_MF, QUICK};
use crate::util::scratch;

/// Whether this process runs as root (needed to reset sockets, make namespaces, mount).
fn root() -> bool {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `program args...` to its end; panics naming it if it cannot start or fails.
fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_reset_connection_fails_both_processes_naming_each_other() {
    if !root() {
        eprintln!("skipped: resetting another process's socket (ss -K) needs root");
        return;
    }
    let dir = scratch("fault-reset");
    let (cluster, mut r0, mut r1) = joined_pair(&dir);
    std::thread::sleep(Duration::from_millis(300));
    // Rank 1 dialed rank 0: destroy rank 1's end, which sends a reset to rank 0's.
    let port = format!(":{}", cluster.ports[0]);
    let killed = sh("ss", &["-K", "-t", "dst", "127.0.0.1", "dport", "=", &port]);
    assert!(killed.contains(&port), "ss -K destroyed nothing:\n{killed}");
    let cut = Instant::now();
    let e0 = r0.wait_fails(Duration::from_secs(10));
    let e1 = r1.wait_fails(Duration::from_secs(10));
    let addr = |r: usize| format!("127.0.0.1:{}", cluster.ports[r]);
    assert!(
        names_lost(&e0, "iterstore: error:", 1, &addr(1)),
        "rank 0 did not name process 1:\n{e0}"
    );
    assert!(
        names_lost(&e1, "iterstore: error:", 0, &addr(0)),
        "rank 1 did not name process 0:\n{e1}"
    );
    // A reset is noticed at once, not after the 5 s heartbeat timeout.
    assert!(
        cut.elapsed() < Duration::from_secs(4),
        "{:?}",
        cut.elapsed()
    );
    for e in [&e0, &e1] {
        assert!(!e.contains("panicked"), "{e}");
    }
}

/// A network namespace with only loopback, deleted when dropped.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("iterstore-test-{tag}-{}", std::process::id());
        sh("ip", &["netns", "add", &name]);
        let ns = Netns(name);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Runs `args` inside the namespace to its end.
    fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.0];
        all.extend(args);
        sh("ip", &all)
    }

    /// `iterstore args...` inside the namespace, as a [`Proc`] labelled `label`.
    fn start(&self, dir: &Path, label: &str, args: &[String]) -> Proc {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.0, env!("CARGO_BIN_EXE_iterstore")])
            .args(args);
        Proc::spawn(dir, label, cmd)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn a_link_gone_silent_fails_both_processes_after_the_heartbeat_timeout() {
    if !root() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let dir = scratch("fault-link");
    let ns = Netns::new("link");
    let cluster = Cluster::new(&dir, 2);
    let mut ranks: Vec<Proc> = (0..2)
        .map(|r| {
            let mut args: Vec<String> = LONG_MF.iter().map(|s| s.to_string()).collect();
            args.extend(cluster.member_args(r));
            ns.start(&dir, &format!("rank{r}"), &args)
        })
        .collect();
    for r in &mut ranks {
        r.wait_for_stderr(JOINED, QUICK);
    }
    std::thread::sleep(Duration::from_millis(300));
    // Nothing is reset or refused: packets simply stop arriving, as when a cable is cut.
    ns.exec(&["ip", "link", "set", "lo", "down"]);
    let cut = Instant::now();
    let errs: Vec<String> = ranks
        .iter_mut()
        .map(|r| r.wait_fails(Duration::from_secs(15)))
        .collect();
    let took = cut.elapsed();
    for (r, e) in errs.iter().enumerate() {
        let other = 1 - r;
        let addr = format!("127.0.0.1:{}", cluster.ports[other]);
        assert!(
            names_lost(e, "iterstore: error:", other, &addr),
            "rank {r} did not name process {other}:\n{e}"
        );
        assert!(e.contains("silent for"), "{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
    // The default heartbeat timeout is 5 s: nobody is declared lost before it.
    assert!(took >= Duration::from_secs(4), "lost after only {took:?}");
}

/// A tmpfs on a fresh directory, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, bytes: u64) -> SmallDisk {
        let at = dir.join("disk");
        std::fs::create_dir_all(&at).unwrap();
        let at_s = at.to_str().unwrap();
        sh(
            "mount",
            &["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs", at_s],
        );
        SmallDisk(at)
    }

    /// Fills the disk with `filler` and then frees `keep_free` bytes of it.
    fn fill_leaving(&self, keep_free: usize) -> PathBuf {
        let filler = self.0.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0xa5u8; 4096];
        let mut written = 0usize;
        while f.write_all(&block).is_ok() {
            written += block.len();
        }
        drop(f);
        let _ = std::fs::remove_file(&filler);
        let keep = written.saturating_sub(keep_free);
        std::fs::write(&filler, vec![0xa5u8; keep]).unwrap();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `run mf --synthetic tiny --iters ITERS -q --output OUT` plus `extra`, started in `dir`.
fn tiny_mf(dir: &Path, label: &str, iters: &str, out: &Path, extra: &[&str]) -> Proc {
    let mut args = vec![
        "run",
        "mf",
        "--synthetic",
        "tiny",
        "--iters",
        iters,
        "-q",
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    Proc::start(dir, label, &args, |_| {})
}

#[test]
fn a_full_disk_while_checkpointing_fails_the_run_and_the_previous_checkpoint_resumes() {
    if !root() {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let dir = scratch("fault-full-disk");
    let disk = SmallDisk::mount(&dir, 1 << 20);
    let ck = disk.0.join("ck");
    let ck_s = ck.to_str().unwrap();
    let want_out = dir.join("want.tsv");
    tiny_mf(&dir, "uninterrupted", "6", &want_out, &[]).wait_ok(QUICK);
    // Two iterations with a checkpoint after the second.
    let ckpt = ["--checkpoint-dir", ck_s, "--checkpoint-every", "2"];
    tiny_mf(&dir, "first", "2", &dir.join("first.tsv"), &ckpt).wait_ok(QUICK);
    let before: Vec<String> = checkpoints(&ck);
    assert_eq!(before.len(), 1, "{before:?}");
    // Room for half a checkpoint: the next one cannot be written.
    let size = dir_bytes(&ck.join(&before[0]));
    let filler = disk.fill_leaving(size / 2);
    let out = dir.join("got.tsv");
    let mut resumed_args = vec!["--resume", ck_s];
    resumed_args.extend(ckpt);
    let mut full = tiny_mf(&dir, "full", "6", &out, &resumed_args);
    let e = full.wait_fails(QUICK);
    assert!(e.contains("No space left on device"), "{e}");
    assert!(e.contains(ck_s), "the failed file is not named:\n{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(
        e.contains(&format!("{} in {ck_s} is intact", before[0])),
        "the error does not say which checkpoint remains:\n{e}"
    );
    // The previous checkpoint is untouched and the failed one left nothing complete.
    assert_eq!(checkpoints(&ck), before);
    // With room again, resuming from it ends where the uninterrupted run ends.
    std::fs::remove_file(filler).unwrap();
    tiny_mf(&dir, "resumed", "6", &out, &resumed_args).wait_ok(QUICK);
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(&want_out).unwrap(),
        "the resumed run's output differs from the uninterrupted run's"
    );
}

/// The complete checkpoints (`ckpt-*` with a manifest) in `dir`, sorted.
fn checkpoints(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("MANIFEST.json").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ckpt-"))
        .collect();
    names.sort();
    names
}

/// The bytes of the files in `dir`.
fn dir_bytes(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len() as usize)
        .sum()
}

/// `run mf --synthetic small --iters 6 --workers 1 --mode virtual -q`.
const SMALL_MF: [&str; 11] = [
    "run",
    "mf",
    "--synthetic",
    "small",
    "--iters",
    "6",
    "--workers",
    "1",
    "--mode",
    "virtual",
    "-q",
];

#[test]
fn a_slow_reader_is_not_lost_and_the_run_completes_within_the_send_queue() {
    let dir = scratch("fault-slow-reader");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (want, got, json) = (path("want.tsv"), path("got.tsv"), path("rank0.json"));
    let mut args: Vec<&str> = SMALL_MF.to_vec();
    args.extend(["--processes", "2", "--output", &want]);
    Proc::start(&dir, "unstalled", &args, |_| {}).wait_ok(QUICK);
    // Rank 0 may queue 1 MiB for rank 1, the least `--send-queue` takes.
    let cluster = Cluster::new(&dir, 2);
    let member: Vec<Vec<String>> = (0..2).map(|r| cluster.member_args(r)).collect();
    let start = |r: usize, extra: &[&str]| {
        let mut a: Vec<&str> = SMALL_MF.to_vec();
        a.extend(["--send-queue", "1M"]);
        a.retain(|&x| x != "-q"); // rank 0's iteration lines say when to stall rank 1
        a.extend(extra);
        a.extend(member[r].iter().map(String::as_str));
        Proc::start(&dir, &format!("rank{r}"), &a, |c| {
            c.env_remove("ITERSTORE_SECRET");
        })
    };
    let mut r0 = start(0, &["--output", &got, "--json", &json]);
    let mut r1 = start(1, &[]);
    r0.wait_for_stderr("iteration 1/6", QUICK);
    // Rank 1 stops reading for 2.5 s: less than the 5 s heartbeat timeout, so it is
    // slow, not lost.
    // SAFETY: kill(2) on the pid of a child we own and have not reaped.
    assert_eq!(unsafe { libc::kill(r1.pid(), libc::SIGSTOP) }, 0);
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(r1.pid(), libc::SIGCONT) }, 0);
    r0.wait_ok(QUICK);
    r1.wait_ok(QUICK);
    assert!(
        std::fs::read(&got).unwrap() == std::fs::read(&want).unwrap(),
        "the stalled run's output differs from the unstalled run's"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let store = &report["store"];
    let (waits, peak) = (
        store["send_waits"].as_u64().unwrap(),
        store["peak_queued_bytes"].as_u64().unwrap(),
    );
    // At most 4 x the bound (the shards' replies, which never wait) plus one message,
    // the largest being a whole-model read of 3 000 rows x 8 factors (~96 KB). Whether
    // rank 0's workers had to wait depends on how much the sockets' buffers absorbed
    // during the stall (under BSP rank 0 is at most one clock ahead), so it is reported,
    // not required; the network layer's own tests make the queue fill deterministically.
    assert!(peak > 0, "nothing was ever queued for rank 1: {store}");
    assert!(
        peak <= (4 << 20) + (128 << 10),
        "{peak} bytes queued for rank 1"
    );
    eprintln!("rank 0 waited {waits} time(s) for rank 1 to read; at most {peak} bytes queued");
}
