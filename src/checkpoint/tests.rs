//! Checkpoints written and read back through the file system: round trips, choosing the
//! newest, incomplete and corrupt checkpoints refused with the file named, pruning, and a
//! disk that fills up at every point of a write leaving the previous checkpoint valid.

use super::durable::DiskBudget;
use super::*;
use crate::element::ElemType;
use crate::ids::Clock;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

mod links;

/// A fresh directory under the system's temporary directory, removed when dropped.
struct TestDir(PathBuf);

impl TestDir {
    /// A fresh directory whose name contains `name`.
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("iterstore-ckpt-{}-{n}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TestDir(dir)
    }

    /// Its path.
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The meta of an LDA-like run of `app` on 2 processes.
fn meta(app: &str) -> Meta {
    Meta {
        app: app.into(),
        tables: vec![
            TableShape {
                name: "lda.word_topic".into(),
                width: 64,
                elem: ElemType::I64,
                rule: crate::rule::Rule::Sum,
            },
            TableShape {
                name: "lda.topic_sum".into(),
                width: 64,
                elem: ElemType::I64,
                rule: crate::rule::Rule::Sum,
            },
        ],
        cluster: ClusterShape {
            processes: 2,
            workers: 2,
            shards: 1,
        },
    }
}

/// The bytes of part `i` of the checkpoint at `clock`: distinct per clock and part.
fn bytes(clock: Clock, i: usize) -> Vec<u8> {
    (0..100 + 37 * i)
        .map(|j| (j as u64 * 31 + clock * 7 + i as u64) as u8)
        .collect()
}

/// The parts every test checkpoint holds.
const PARTS: [&str; 3] = ["shard-0.rows", "shard-1.rows", "process-0.app"];

/// Writes and commits the checkpoint at `clock` with the parts of [`bytes`].
fn write(root: &Path, clock: Clock) -> Committed {
    let w = CheckpointWriter::begin(root, clock, meta("lda")).unwrap();
    write_parts(&w, clock).unwrap();
    w.commit().unwrap()
}

/// Writes the parts of [`bytes`] for `clock` through `w`.
fn write_parts(w: &CheckpointWriter, clock: Clock) -> Result<(), CheckpointError> {
    for (i, name) in PARTS.iter().enumerate() {
        w.write_part(name, |out| out.write_all(&bytes(clock, i)))?;
    }
    Ok(())
}

/// Opens the newest checkpoint in `root` as this run (`meta("lda")`).
fn open(root: &Path) -> Result<Checkpoint, CheckpointError> {
    Checkpoint::open_newest(root, &meta("lda"), ClusterRule::Same)
}

/// Opens the newest checkpoint and checks it is the one at `clock`, byte for byte.
fn assert_holds(root: &Path, clock: Clock) {
    let ck = open(root).unwrap();
    assert_eq!(ck.clock(), clock);
    assert_eq!(ck.meta(), &meta("lda"));
    assert_eq!(ck.dir(), root.join(format!("ckpt-{clock:08}")));
    let names: Vec<&str> = ck.parts().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, PARTS);
    for (i, name) in PARTS.iter().enumerate() {
        assert_eq!(ck.read_part(name).unwrap(), bytes(clock, i), "{name}");
    }
}

/// The error of an open that must fail, as text.
fn err(r: Result<Checkpoint, CheckpointError>) -> String {
    r.map(|ck| ck.clock()).unwrap_err().to_string()
}

/// The files in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn round_trip() {
    let d = TestDir::new("round-trip");
    let root = d.path().join("ckpts"); // created by begin
    let done = write(&root, 40);
    assert_eq!(done.clock, 40);
    assert_eq!(done.dir, root.join("ckpt-00000040"));
    assert!(done.pruned.is_empty() && done.prune_failures.is_empty());
    // Only the parts and the manifest: no temporary file is left behind.
    let mut expected: Vec<String> = PARTS.iter().map(|s| s.to_string()).collect();
    expected.push("MANIFEST.json".into());
    expected.sort();
    assert_eq!(files(&done.dir), expected);
    assert_holds(&root, 40);

    // Streamed back through `part`, and a part the manifest does not list.
    let ck = open(&root).unwrap();
    let mut r = ck.part("shard-1.rows").unwrap();
    assert_eq!(r.size(), bytes(40, 1).len() as u64);
    let mut first = [0u8; 10];
    r.read_exact(&mut first).unwrap();
    assert_eq!(first, bytes(40, 1)[..10]);
    let e = ck.part("shard-9.rows").unwrap_err().to_string();
    assert!(
        e.ends_with("ckpt-00000040: the checkpoint has no part 'shard-9.rows'"),
        "{e}"
    );
}

#[test]
fn parts_stream_from_threads_and_other_processes() {
    let d = TestDir::new("threads");
    let root = d.path();
    let w = CheckpointWriter::begin(root, 8, meta("lda")).unwrap();
    let mut part = w.part("shard-0.rows").unwrap();
    assert_eq!(part.name(), "shard-0.rows");
    assert_eq!(part.path(), w.dir().join("shard-0.rows"));
    std::thread::spawn(move || {
        for chunk in bytes(8, 0).chunks(7) {
            part.write_all(chunk).unwrap();
        }
        part.finish().unwrap();
    })
    .join()
    .unwrap();
    // Parts 1 and 2 written by "another process" into the same directory: its entries
    // are recorded by the committing one.
    let other = CheckpointWriter::begin(root, 8, meta("lda")).unwrap();
    for (i, name) in PARTS.iter().enumerate().skip(1) {
        let entry = other
            .write_part(name, |out| out.write_all(&bytes(8, i)))
            .unwrap();
        w.record(entry).unwrap();
    }
    w.commit().unwrap();
    assert_holds(root, 8);
}

#[test]
fn the_newest_complete_checkpoint_is_chosen() {
    let d = TestDir::new("newest");
    let root = d.path();
    // Two complete checkpoints (pruning undone by hand): the larger clock wins, by number
    // and not by name ("ckpt-99999999" sorts after "ckpt-100000000").
    write(root, 99_999_999);
    let keep = d.path().join("kept");
    fs::rename(root.join("ckpt-99999999"), &keep).unwrap();
    write(root, 100_000_000);
    fs::rename(&keep, root.join("ckpt-99999999")).unwrap();
    assert_holds(root, 100_000_000);
    // A newer incomplete one (and unrelated entries) are skipped.
    let w = CheckpointWriter::begin(root, 100_000_001, meta("lda")).unwrap();
    write_parts(&w, 100_000_001).unwrap();
    drop(w);
    fs::write(root.join("ckpt-00000007"), b"a file, not a directory").unwrap();
    fs::create_dir(root.join("notes")).unwrap();
    assert_holds(root, 100_000_000);
}

#[test]
fn no_complete_checkpoint_says_why() {
    let d = TestDir::new("none");
    let root = d.path();
    let missing = root.join("nope");
    assert_eq!(
        err(open(&missing)),
        format!(
            "{}: the checkpoint directory does not exist",
            missing.display()
        )
    );
    assert_eq!(
        err(open(root)),
        format!(
            "no complete checkpoint in {} (it holds no ckpt-* directory)",
            root.display()
        )
    );
    let w = CheckpointWriter::begin(root, 50, meta("lda")).unwrap();
    write_parts(&w, 50).unwrap();
    drop(w); // never committed
    assert_eq!(
        err(open(root)),
        format!(
            "no complete checkpoint in {} (ckpt-00000050 has no MANIFEST.json: it was never \
             completed)",
            root.display()
        )
    );
    CheckpointWriter::begin(root, 60, meta("lda")).unwrap();
    assert!(err(open(root)).ends_with(
        "(ckpt-00000060, ckpt-00000050 have no MANIFEST.json: they were never completed)"
    ));
    // Opened directly, the incomplete one is named.
    let dir = root.join("ckpt-00000050");
    assert_eq!(
        err(Checkpoint::open(&dir, &meta("lda"), ClusterRule::Same)),
        format!(
            "{}: no MANIFEST.json: the checkpoint was never completed",
            dir.display()
        )
    );
}

/// Writes the checkpoint at 40, applies `corrupt` to its directory, and returns the
/// error of opening it, with the directory's path replaced by `D`.
fn corrupted(corrupt: impl FnOnce(&Path)) -> String {
    let d = TestDir::new("corrupt");
    let done = write(d.path(), 40);
    corrupt(&done.dir);
    err(open(d.path())).replace(&done.dir.display().to_string(), "D")
}

/// A corruption of a checkpoint's directory.
type Corruption = Box<dyn FnOnce(&Path)>;

#[test]
fn each_corruption_is_refused_naming_the_file() {
    let size = bytes(40, 1).len();
    let cases: Vec<(Corruption, String)> = vec![
        (
            Box::new(|dir| {
                let f = fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("shard-1.rows"));
                f.unwrap().set_len(100).unwrap();
            }),
            format!("D/shard-1.rows: size 100 does not match the manifest's {size}"),
        ),
        (
            Box::new(|dir| {
                let mut f = fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join("shard-1.rows"));
                f.as_mut().unwrap().write_all(b"x").unwrap();
            }),
            format!(
                "D/shard-1.rows: size {} does not match the manifest's {size}",
                size + 1
            ),
        ),
        (
            Box::new(|dir| {
                let path = dir.join("process-0.app");
                let mut b = fs::read(&path).unwrap();
                b[17] ^= 0x10;
                fs::write(&path, b).unwrap();
            }),
            "D/process-0.app: checksum mismatch (SHA-256 ".into(),
        ),
        (
            Box::new(|dir| fs::remove_file(dir.join("shard-0.rows")).unwrap()),
            "D/shard-0.rows: missing (the manifest lists it)".into(),
        ),
        (
            Box::new(|dir| {
                fs::remove_file(dir.join("shard-0.rows")).unwrap();
                fs::create_dir(dir.join("shard-0.rows")).unwrap();
            }),
            "D/shard-0.rows: not a regular file".into(),
        ),
        (
            Box::new(|dir| {
                let mut f = fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join("MANIFEST.json"));
                f.as_mut().unwrap().write_all(b"garbage").unwrap();
            }),
            "D/MANIFEST.json: corrupt manifest: trailing characters at line".into(),
        ),
        (
            Box::new(|dir| fs::write(dir.join("MANIFEST.json"), b"").unwrap()),
            "D/MANIFEST.json: corrupt manifest: EOF while parsing".into(),
        ),
        (
            Box::new(|dir| {
                let path = dir.join("MANIFEST.json");
                let text = fs::read_to_string(&path).unwrap();
                fs::write(&path, text.replace("\"clock\": 40", "\"clock\": 41")).unwrap();
            }),
            "D/MANIFEST.json: corrupt manifest: it holds clock 41, its directory is named \
             for clock 40"
                .into(),
        ),
    ];
    for (corrupt, expected) in cases {
        let e = corrupted(corrupt);
        assert!(
            e.starts_with(&expected),
            "{e}\ndoes not start with\n{expected}"
        );
    }
}

#[test]
fn another_run_is_refused_naming_the_difference() {
    let d = TestDir::new("meta");
    let root = d.path();
    let w = CheckpointWriter::begin(root, 40, meta("mf")).unwrap();
    w.commit().unwrap();
    let manifest = root.join("ckpt-00000040/MANIFEST.json");
    assert_eq!(
        err(open(root)),
        format!("{}: written by app mf, this run is lda", manifest.display())
    );
    let mut wider = meta("mf");
    wider.tables[1].width = 256;
    assert_eq!(
        err(Checkpoint::open_newest(root, &wider, ClusterRule::Same)),
        format!(
            "{}: table lda.topic_sum has width 256 here and 64 in the checkpoint",
            manifest.display()
        )
    );
    let mut bigger = meta("mf");
    bigger.cluster.processes = 3;
    assert!(
        err(Checkpoint::open_newest(root, &bigger, ClusterRule::Same))
            .contains("written by a cluster of 2 processes")
    );
    let ck = Checkpoint::open_newest(root, &bigger, ClusterRule::Any).unwrap();
    assert_eq!(ck.meta().cluster.processes, 2); // the caller redistributes
    assert!(ck.parts().is_empty());
}

#[test]
fn a_newer_checkpoint_prunes_older_ones() {
    let d = TestDir::new("prune");
    let root = d.path();
    write(root, 10);
    // Abandoned attempts: older (15) and newer (25) than the next commit.
    for clock in [15, 25] {
        let w = CheckpointWriter::begin(root, clock, meta("lda")).unwrap();
        w.write_part("shard-0.rows", |out| out.write_all(b"partial"))
            .unwrap();
    }
    let done = write(root, 20);
    let mut pruned = done.pruned.clone();
    pruned.sort();
    assert_eq!(
        pruned,
        [root.join("ckpt-00000010"), root.join("ckpt-00000015")]
    );
    assert!(done.prune_failures.is_empty());
    assert_eq!(files(root), ["ckpt-00000020", "ckpt-00000025"]);
    assert_holds(root, 20);
    // The abandoned 25 is reused by the next attempt at 25, then pruned by 30.
    write(root, 25);
    assert_holds(root, 25);
    write(root, 30);
    assert_eq!(files(root), ["ckpt-00000030"]);
}

#[test]
fn an_existing_complete_checkpoint_is_never_overwritten() {
    let d = TestDir::new("not-newer");
    let root = d.path();
    write(root, 20);
    for clock in [20, 10] {
        let e = CheckpointWriter::begin(root, clock, meta("lda"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "{}: a complete checkpoint at clock 20, not older than clock {clock} being \
                 written (resume from it, or remove it)",
                root.join("ckpt-00000020").display()
            )
        );
    }
    assert_holds(root, 20);
}

#[test]
fn a_checkpoint_with_an_unfinished_or_repeated_part_cannot_commit() {
    let d = TestDir::new("unfinished");
    let root = d.path();
    write(root, 10);
    let w = CheckpointWriter::begin(root, 20, meta("lda")).unwrap();
    w.write_part("shard-0.rows", |out| out.write_all(b"rows"))
        .unwrap();
    let dup = w.part("shard-0.rows").unwrap_err().to_string();
    assert!(
        dup.ends_with("ckpt-00000020/shard-0.rows: part written twice"),
        "{dup}"
    );
    let bad = w.part("../escape").unwrap_err().to_string();
    assert!(
        bad.starts_with("invalid checkpoint part name '../escape'"),
        "{bad}"
    );
    let mut part = w.part("shard-1.rows").unwrap();
    part.write_all(b"half").unwrap();
    drop(part); // abandoned: its temporary file goes, its name blocks the commit
    assert_eq!(files(w.dir()), ["shard-0.rows"]);
    let e = w.commit().unwrap_err().to_string();
    assert!(
        e.ends_with(
            "ckpt-00000020/shard-1.rows: begun but not finished, so the checkpoint \
                     cannot be completed"
        ),
        "{e}"
    );
    assert_holds(root, 10);
}

#[test]
fn a_failing_part_writer_names_its_file_and_leaves_nothing() {
    let d = TestDir::new("write-fails");
    let root = d.path();
    let w = CheckpointWriter::begin(root, 20, meta("lda")).unwrap();
    let e = w
        .write_part("process-0.app", |_| {
            Err(std::io::Error::other("rng state unavailable"))
        })
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "{}: write failed: rng state unavailable",
            w.dir().join("process-0.app").display()
        )
    );
    assert!(files(w.dir()).is_empty());
    assert!(w.commit().is_err());
}

#[test]
fn abort_removes_the_attempt() {
    let d = TestDir::new("abort");
    let root = d.path();
    write(root, 10);
    let w = CheckpointWriter::begin(root, 20, meta("lda")).unwrap();
    write_parts(&w, 20).unwrap();
    w.abort().unwrap();
    assert_eq!(files(root), ["ckpt-00000010"]);
    assert_holds(root, 10);
}

/// Bytes the checkpoint at `clock` writes: its parts and its manifest.
fn checkpoint_bytes(root: &Path, clock: Clock) -> u64 {
    let dir = root.join(format!("ckpt-{clock:08}"));
    files(&dir)
        .iter()
        .map(|f| fs::metadata(dir.join(f)).unwrap().len())
        .sum()
}

#[test]
fn a_full_disk_leaves_the_previous_checkpoint_valid() {
    let d = TestDir::new("full-disk");
    let root = d.path();
    // The size of checkpoint 20, measured on a scratch copy.
    let scratch = TestDir::new("full-disk-scratch");
    write(scratch.path(), 20);
    let total = checkpoint_bytes(scratch.path(), 20);
    let parts: u64 = (0..PARTS.len()).map(|i| bytes(20, i).len() as u64).sum();

    write(root, 10);
    // The disk fills up at every kind of point: before anything, inside each part, at
    // each part boundary, inside the manifest, one byte short of the end.
    let mut budgets: Vec<u64> = (0..total).step_by(23).collect();
    budgets.extend([1, 99, 100, 101, parts - 1, parts, parts + 1, total - 1]);
    for budget in budgets {
        let w = CheckpointWriter::begin(root, 20, meta("lda"))
            .unwrap()
            .with_budget(DiskBudget::new(budget));
        let e = match write_parts(&w, 20) {
            Err(e) => e,
            Ok(()) => w.commit().unwrap_err(),
        }
        .to_string();
        let failing = if budget < parts {
            "shard-|process-"
        } else {
            "MANIFEST.json"
        };
        assert!(
            e.contains("write failed: No space left on device"),
            "budget {budget}: {e}"
        );
        assert!(
            failing
                .split('|')
                .any(|f| e.contains(&format!("ckpt-00000020/{f}"))),
            "budget {budget}: {e} does not name a file {failing}"
        );
        // No temporary file stays, no manifest appeared, and 10 is still the newest.
        let dir = root.join("ckpt-00000020");
        assert!(
            files(&dir).iter().all(|f| !f.starts_with('.')),
            "{:?}",
            files(&dir)
        );
        assert!(!dir.join("MANIFEST.json").exists());
        assert_holds(root, 10);
    }
    // With room enough, the retry completes and supersedes 10.
    let w = CheckpointWriter::begin(root, 20, meta("lda"))
        .unwrap()
        .with_budget(DiskBudget::new(total));
    write_parts(&w, 20).unwrap();
    w.commit().unwrap();
    assert_holds(root, 20);
    assert_eq!(files(root), ["ckpt-00000020"]);
}

#[test]
fn a_part_that_shrinks_after_verification_fails_to_read() {
    let d = TestDir::new("shrinks");
    let done = write(d.path(), 40);
    let ck = open(d.path()).unwrap();
    fs::write(done.dir.join("shard-0.rows"), b"short").unwrap();
    let path = done.dir.join("shard-0.rows");
    assert_eq!(
        ck.read_part("shard-0.rows").unwrap_err().to_string(),
        format!(
            "{}: size 5 does not match the manifest's 100",
            path.display()
        )
    );
    let mut streamed = Vec::new();
    let e = ck.part("shard-0.rows").unwrap().read_to_end(&mut streamed);
    assert_eq!(
        e.unwrap_err().to_string(),
        format!(
            "{}: ended after 5 bytes, the manifest lists 100 (changed since it was verified)",
            path.display()
        )
    );
}

/// A size-limited tmpfs mounted on a fresh directory, unmounted when dropped.
struct SmallDisk {
    dir: TestDir,
}

impl SmallDisk {
    /// A tmpfs of `bytes`, or `None` when this process cannot mount one (not root, or no
    /// permission in a container).
    fn mount(bytes: u64) -> Option<SmallDisk> {
        // SAFETY: `geteuid` has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let dir = TestDir::new("tmpfs");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// The same as [`a_full_disk_leaves_the_previous_checkpoint_valid`] on a real full file
/// system. Needs root to mount a tmpfs; skipped (with a note) otherwise.
#[test]
fn a_real_full_disk_leaves_the_previous_checkpoint_valid() {
    let Some(disk) = SmallDisk::mount(256 << 10) else {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    };
    let root = disk.dir.path();
    write(root, 10);
    let w = CheckpointWriter::begin(root, 20, meta("lda")).unwrap();
    let big = vec![7u8; 1 << 20];
    let e = w
        .write_part("shard-0.rows", |out| out.write_all(&big))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "{}: write failed: No space left on device (os error 28)",
            root.join("ckpt-00000020/shard-0.rows").display()
        )
    );
    assert!(files(w.dir()).is_empty()); // the temporary file is gone
    assert_holds(root, 10);
    w.abort().unwrap();
    write(root, 20);
    assert_holds(root, 20);
}
