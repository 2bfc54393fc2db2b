//! Checkpoints of an app run ([`AppConfig::checkpoint`], [`AppConfig::resume`]; the CLI's
//! `--checkpoint-dir D --checkpoint-every N` and `--resume D`): when an app writes one,
//! what each process's **state part** holds, and what a resumed run gets back.
//!
//! The tables are the store's ([`Cluster::checkpoint_with`], [`Cluster::resume`]). On top
//! of them every process saves one state part (`StatePart`, encoded by `encode`): a
//! versioned header — the app, the iterations the checkpoint holds, the run's parameters
//! and dataset sizes as JSON, the cluster's total workers and this process's first worker
//! — then one opaque blob per worker of the process (PageRank's propagated ranks, LDA's
//! topic assignments; empty for MF). A resume reads every process's part, checks that
//! they agree with each other, with the checkpoint's clock and with this run (same app,
//! parameters and data; iterations still to do), and hands the app every old worker's
//! blob in global worker order (`Restart`); the app decides whether it can take them on
//! its own number of workers. Every refusal names the file and why.
//!
//! This module knows the header and the order of the blobs, not what a blob holds.

use std::path::PathBuf;
use std::time::Instant;

use iterstore::checkpoints::ClusterRule;
use iterstore::Cluster;

use super::{AppConfig, AppError, ResumeReport};

/// Where and how often a run writes checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// The checkpoint directory (created if missing; shared by every process).
    pub dir: PathBuf,
    /// A checkpoint after every `every`-th iteration; at least 1.
    pub every: usize,
}

/// The first bytes of a state part.
const MAGIC: &[u8; 8] = b"ISAPPST\0";
/// The state part's format version.
const VERSION: u32 = 1;
/// The initialisation run's clocks, what most apps take before their first iteration
/// ([`RunId::init_clocks`]).
pub(crate) const INIT_CLOCKS: u64 = 1;

/// One process's state part: the header and its workers' blobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatePart {
    /// `mf`, `lda`, `pagerank` or `dnn`.
    pub(crate) app: String,
    /// Iterations done when the checkpoint was written.
    pub(crate) done: u64,
    /// The run's parameters and dataset sizes as one JSON object.
    pub(crate) run: String,
    /// Workers of the whole cluster.
    pub(crate) total_workers: u64,
    /// Global id of this process's first worker.
    pub(crate) first_worker: u64,
    /// One blob per worker of this process, in order.
    pub(crate) workers: Vec<Vec<u8>>,
}

/// The state part's bytes: [`MAGIC`], then little-endian `u32` version, the app, `u64`
/// done, the run JSON, `u64` total workers and first worker, `u64` blob count, each blob
/// (strings and blobs as a `u64` length and the bytes).
pub(crate) fn encode(p: &StatePart) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + p.workers.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    put_bytes(&mut out, p.app.as_bytes());
    out.extend_from_slice(&p.done.to_le_bytes());
    put_bytes(&mut out, p.run.as_bytes());
    out.extend_from_slice(&p.total_workers.to_le_bytes());
    out.extend_from_slice(&p.first_worker.to_le_bytes());
    out.extend_from_slice(&(p.workers.len() as u64).to_le_bytes());
    for w in &p.workers {
        put_bytes(&mut out, w);
    }
    out
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads `bytes` front to back, every length checked against what is left.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!(
                "truncated: {what} needs {n} bytes, {} left",
                self.bytes.len()
            ));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    /// The next little-endian `u64`.
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, String> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// The next length-prefixed bytes.
    fn bytes(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u64(what)?;
        let n = usize::try_from(n).map_err(|_| format!("{what}: length {n} too large"))?;
        self.take(n, what)
    }

    /// Whether every byte was read (an optional part at the end is absent).
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Fails unless every byte was read.
    pub(crate) fn finish(self) -> Result<(), String> {
        match self.bytes.len() {
            0 => Ok(()),
            n => Err(format!("{n} trailing bytes")),
        }
    }
}

/// Decodes a state part, rejecting another format, version, truncation or trailing bytes.
pub(crate) fn decode(bytes: &[u8]) -> Result<StatePart, String> {
    let mut c = Cursor::new(bytes);
    if c.take(MAGIC.len(), "the format tag")? != MAGIC {
        return Err("not an iterstore app state part".into());
    }
    let version = u32::from_le_bytes(c.take(4, "the version")?.try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!(
            "format version {version}, this build reads {VERSION}"
        ));
    }
    let text = |b: &[u8], what: &str| {
        String::from_utf8(b.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    };
    let app = text(c.bytes("the app")?, "the app")?;
    let done = c.u64("the iteration")?;
    let run = text(c.bytes("the parameters")?, "the parameters")?;
    let total_workers = c.u64("the total workers")?;
    let first_worker = c.u64("the first worker")?;
    let count = c.u64("the worker count")?;
    // Each blob has at least its 8-byte length: bound the count before allocating.
    if count > bytes.len() as u64 / 8 {
        return Err(format!(
            "{count} workers cannot fit in {} bytes",
            bytes.len()
        ));
    }
    let mut workers = Vec::with_capacity(count as usize);
    for w in 0..count {
        workers.push(c.bytes(&format!("worker {w}'s state"))?.to_vec());
    }
    c.finish()?;
    Ok(StatePart {
        app,
        done,
        run,
        total_workers,
        first_worker,
        workers,
    })
}

/// What a resumed run continues from.
#[derive(Debug)]
pub(crate) struct Restart {
    /// Where it was kept: the checkpoint's directory (`<dir>/ckpt-<clock>`), or the
    /// replicated shards.
    pub(crate) from: String,
    /// Iterations the checkpoint holds: the run continues with iteration `done` (0-based).
    pub(crate) done: usize,
    /// Every worker's blob of the cluster that wrote the checkpoint, in global worker
    /// order (so its length is that cluster's total workers).
    pub(crate) workers: Vec<Vec<u8>>,
}

impl Restart {
    /// What the run report says about it.
    pub(crate) fn report(&self) -> ResumeReport {
        ResumeReport {
            checkpoint: self.from.clone(),
            iteration: self.done,
        }
    }

    /// This process's `workers` blobs starting at global worker `first`, when the
    /// checkpoint was written by `total` workers in all (the same total is required: the
    /// app's per-worker state follows a partition by global worker id).
    pub(crate) fn same_workers(
        &self,
        app: &str,
        total: usize,
        first: usize,
        workers: usize,
    ) -> Result<&[Vec<u8>], AppError> {
        if self.workers.len() != total {
            return Err(AppError::Invalid(format!(
                "{}: written by {} workers in all, this run has {total}; {app} keeps \
                 per-worker state partitioned by worker, so resume with {} workers in all \
                 (--workers times the processes)",
                self.from,
                self.workers.len(),
                self.workers.len()
            )));
        }
        Ok(&self.workers[first..first + workers])
    }

    /// An error about worker `w`'s state in this checkpoint.
    pub(crate) fn bad_state(&self, w: usize, why: impl std::fmt::Display) -> AppError {
        AppError::Invalid(format!("{}: worker {w}'s state: {why}", self.from))
    }
}

/// The run's parameters and dataset sizes as the state part records them.
pub(crate) fn run_json(report: &super::RunReport) -> String {
    serde_json::json!({ "params": report.params, "dataset": report.dataset }).to_string()
}

/// Refuses, before any work, a checkpoint directory that already holds a checkpoint
/// while this run does not resume from it (its first checkpoint would be refused midway,
/// or it would mix two runs' checkpoints).
pub(crate) fn check_dirs(cfg: &AppConfig) -> Result<(), AppError> {
    if let Some(dir) = &cfg.resume {
        // An optional one not created yet is created by the first checkpoint.
        let not_yet = cfg.resume_optional && !dir.exists();
        if !dir.is_dir() && !not_yet {
            return Err(AppError::Invalid(format!(
                "resume: {} is not a directory",
                dir.display()
            )));
        }
    }
    let Some(ck) = &cfg.checkpoint else {
        return Ok(());
    };
    if cfg.resume.as_deref() == Some(ck.dir.as_path()) {
        return Ok(());
    }
    // A missing directory is created by the first checkpoint.
    if let Some(found) = iterstore::checkpoints::newest_checkpoint(&ck.dir)? {
        return Err(AppError::Invalid(format!(
            "checkpoint directory {} already holds checkpoint {}: resume from it \
             (--resume {}) or choose an empty directory",
            ck.dir.display(),
            found.file_name().unwrap_or_default().to_string_lossy(),
            ck.dir.display()
        )));
    }
    Ok(())
}

/// The per-app facts a checkpoint is checked against.
pub(crate) struct RunId<'a> {
    /// `mf`, `lda`, `pagerank` or `dnn`.
    pub(crate) app: &'static str,
    /// [`run_json`] of this run.
    pub(crate) run: &'a str,
    /// CLOCKs per iteration; 0 when it varies (L-BFGS's line search), and the
    /// checkpoint's clock is then not checked against its iterations.
    pub(crate) clocks_per_iteration: u64,
    /// CLOCKs before the first iteration ([`INIT_CLOCKS`], the initialisation run's, for
    /// most apps): a run's clock after `i` iterations is `init_clocks + i *
    /// clocks_per_iteration`.
    pub(crate) init_clocks: u64,
}

/// With replicated shards, after a cluster of this process failed because another was
/// lost: restores the tables and the workers' states from what the processes kept
/// ([`Cluster::recover`]). Else with [`AppConfig::resume`], restores the tables from the
/// newest complete checkpoint there. Either way a collective (every process calls it
/// alike, after creating the tables and before any run) that returns what the run
/// continues from; `None` when there is nothing to continue from.
pub(crate) fn resume(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    id: &RunId<'_>,
) -> Result<Option<Restart>, AppError> {
    if let Some(recovered) = cluster.recover()? {
        let clock = recovered.clock();
        let parts = (recovered.states().iter().enumerate())
            .map(|(rank, s)| {
                (
                    format!("process {rank}'s state kept by the replicas"),
                    s.clone(),
                )
            })
            .collect();
        let from = format!("the replicated shards at clock {clock}");
        return restart_from(from, clock, parts, cfg, id).map(Some);
    }
    let Some(root) = &cfg.resume else {
        return Ok(None);
    };
    if cfg.resume_optional && !any_checkpoint(cluster, root)? {
        return Ok(None);
    }
    let resumed = cluster.resume(root, id.app, ClusterRule::Any)?;
    let dir = resumed.dir().to_path_buf();
    let parts = (0..resumed.processes())
        .map(|rank| {
            let file = dir.join(format!("process-{rank}.app"));
            let state = resumed.app_state(rank)?.ok_or_else(|| {
                AppError::Invalid(format!(
                    "{}: missing: the checkpoint holds no app state for it",
                    file.display()
                ))
            })?;
            Ok((file.display().to_string(), state))
        })
        .collect::<Result<Vec<_>, AppError>>()?;
    restart_from(dir.display().to_string(), resumed.clock(), parts, cfg, id).map(Some)
}

/// What the run continues from, out of every process's state part (`parts`: each with
/// the name errors give it) at `clock`, kept by `from` (a checkpoint's directory, or the
/// replicas): the parts checked against each other and this run.
fn restart_from(
    from: String,
    clock: u64,
    parts: Vec<(String, Vec<u8>)>,
    cfg: &AppConfig,
    id: &RunId<'_>,
) -> Result<Restart, AppError> {
    let mut workers = Vec::new();
    let mut done = None;
    let processes = parts.len();
    for (rank, (name, bytes)) in parts.into_iter().enumerate() {
        let bad = |why: String| AppError::Invalid(format!("{name}: {why}"));
        let part = decode(&bytes).map_err(bad)?;
        if part.app != id.app {
            return Err(bad(format!(
                "the state of app {}, this run is {}",
                part.app, id.app
            )));
        }
        if part.run != id.run {
            return Err(bad(run_mismatch(&part.run, id.run)));
        }
        if part.first_worker != workers.len() as u64 {
            return Err(bad(format!(
                "starts at worker {}, the parts before it end at {}",
                part.first_worker,
                workers.len()
            )));
        }
        let first = *done.get_or_insert(part.done);
        if first != part.done {
            return Err(bad(format!(
                "holds iteration {}, process 0's part {first}",
                part.done
            )));
        }
        workers.extend(part.workers);
        if rank + 1 == processes && part.total_workers != workers.len() as u64 {
            return Err(bad(format!(
                "says {} workers in all, the parts hold {}",
                part.total_workers,
                workers.len()
            )));
        }
    }
    let done = done.unwrap_or(0);
    let want = id.init_clocks + done * id.clocks_per_iteration;
    if id.clocks_per_iteration > 0 && clock != want {
        return Err(AppError::Invalid(format!(
            "{from}: clock {clock} does not follow iteration {done} ({} clocks each after {})",
            id.clocks_per_iteration, id.init_clocks
        )));
    }
    let done = usize::try_from(done).unwrap_or(usize::MAX);
    if done > cfg.iterations {
        return Err(AppError::Invalid(format!(
            "{from}: holds {done} iterations, more than the {} asked for",
            cfg.iterations
        )));
    }
    Ok(Restart {
        from,
        done,
        workers,
    })
}

/// Whether `root` holds a complete checkpoint to resume from, as every process of the
/// cluster finds it (a collective: the processes agree on the newest checkpoint's name,
/// so that none resumes while another starts afresh).
fn any_checkpoint(cluster: &mut Cluster, root: &std::path::Path) -> Result<bool, AppError> {
    let newest = iterstore::checkpoints::newest_checkpoint(root)?;
    let name = newest.as_ref().map_or_else(
        || "none".to_string(),
        |d| {
            d.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        },
    );
    cluster.agree(&[(
        "the newest complete checkpoint in the checkpoint directory",
        &name,
    )])?;
    Ok(newest.is_some())
}

/// Why a checkpoint's run JSON `found` differs from this run's `here`: the first
/// parameter or dataset size that differs.
fn run_mismatch(found: &str, here: &str) -> String {
    let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap_or_default();
    let (found, here) = (parse(found), parse(here));
    for section in ["params", "dataset"] {
        let (f, h) = (&found[section], &here[section]);
        let keys = |v: &serde_json::Value| -> Vec<String> {
            v.as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        let mut all = keys(f);
        all.extend(keys(h));
        all.sort();
        all.dedup();
        for k in all {
            if f[&k] != h[&k] && k == "input_digest" {
                return format!(
                    "written from other input data of the same shape (input digest {}, this run's {})",
                    f[&k], h[&k]
                );
            }
            if f[&k] != h[&k] {
                return format!(
                    "written with {section} {k} = {}, this run has {}",
                    f[&k], h[&k]
                );
            }
        }
    }
    "written by a run with other parameters".into()
}

/// After iteration `done` (1-based count): with replicated shards, keeps this process's
/// state part with `workers`' blobs for a recovery ([`Cluster::keep_state`], every
/// iteration); writes a checkpoint if the run asked for one now, the tables and the same
/// state part. The blobs are built only when one of them is due. Returns the seconds the
/// checkpoint took, or `None` if none was due.
pub(crate) fn after_iteration(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    id: &RunId<'_>,
    done: usize,
    workers: impl FnOnce() -> Vec<Vec<u8>>,
) -> Result<Option<f64>, AppError> {
    let due = cfg
        .checkpoint
        .as_ref()
        .filter(|ck| done.is_multiple_of(ck.every));
    let keep = cfg.shard_replicas > 1;
    if due.is_none() && !keep {
        return Ok(None);
    }
    let part = StatePart {
        app: id.app.into(),
        done: done as u64,
        run: id.run.into(),
        total_workers: cluster.total_workers() as u64,
        first_worker: (cluster.rank() * cfg.workers) as u64,
        workers: workers(),
    };
    let bytes = encode(&part);
    if keep {
        cluster.keep_state(&bytes)?;
    }
    let Some(ck) = due else {
        return Ok(None);
    };
    let start = Instant::now();
    if let Err(source) = cluster.checkpoint_with(&ck.dir, id.app, &bytes) {
        let dir = ck.dir.display();
        // Room is what a failed write may need; a cluster that failed needs none.
        let room = match source {
            iterstore::Error::Checkpoint(_) => "make room and ",
            _ => "",
        };
        let kept = match iterstore::checkpoints::newest_checkpoint(&ck.dir) {
            Ok(Some(kept)) => format!(
                "{} in {dir} is intact: {room}rerun with --resume {dir}",
                kept.file_name().unwrap_or_default().to_string_lossy()
            ),
            Ok(None) => format!("{dir} holds no earlier checkpoint"),
            Err(e) => format!("cannot tell which earlier checkpoint remains: {e}"),
        };
        return Err(AppError::Checkpoint {
            iteration: done,
            source,
            kept,
        });
    }
    Ok(Some(start.elapsed().as_secs_f64()))
}

/// Little-endian `f64`s, appended.
pub(crate) fn put_f64s(out: &mut Vec<u8>, xs: &[f64]) {
    out.extend_from_slice(&(xs.len() as u64).to_le_bytes());
    for x in xs {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// `n` little-endian `f64`s as [`put_f64s`] wrote them, refusing another count.
pub(crate) fn get_f64s(c: &mut Cursor<'_>, n: usize, what: &str) -> Result<Vec<f64>, String> {
    let found = c.u64(what)?;
    if found != n as u64 {
        return Err(format!("{what}: {found} values, this run needs {n}"));
    }
    let b = c.take(n * 8, what)?;
    Ok(b.chunks_exact(8)
        .map(|x| f64::from_le_bytes(x.try_into().expect("8 bytes")))
        .collect())
}

/// Little-endian `f32`s, appended after their count.
pub(crate) fn put_f32s(out: &mut Vec<u8>, xs: &[f32]) {
    out.extend_from_slice(&(xs.len() as u64).to_le_bytes());
    for x in xs {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// `n` little-endian `f32`s as [`put_f32s`] wrote them into `into`, refusing another
/// count.
pub(crate) fn get_f32s(c: &mut Cursor<'_>, into: &mut [f32], what: &str) -> Result<(), String> {
    let n = into.len();
    let found = c.u64(what)?;
    if found != n as u64 {
        return Err(format!("{what}: {found} values, this run needs {n}"));
    }
    let b = c.take(n * 4, what)?;
    for (x, v) in into.iter_mut().zip(b.chunks_exact(4)) {
        *x = f32::from_le_bytes(v.try_into().expect("4 bytes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part() -> StatePart {
        StatePart {
            app: "lda".into(),
            done: 3,
            run: r#"{"params":{"seed":1},"dataset":{"docs":5}}"#.into(),
            total_workers: 4,
            first_worker: 2,
            workers: vec![vec![1, 2, 3], vec![]],
        }
    }

    #[test]
    fn a_state_part_round_trips() {
        assert_eq!(decode(&encode(&part())).unwrap(), part());
    }

    #[test]
    fn every_truncation_and_trailing_bytes_are_refused() {
        let bytes = encode(&part());
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "a cut at {n} was accepted");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(decode(&long).unwrap_err(), "1 trailing bytes");
        let mut other = bytes;
        other[8] = 2;
        assert!(decode(&other).unwrap_err().contains("version 2"));
    }

    #[test]
    fn a_huge_worker_count_is_refused_before_allocating() {
        let mut bytes = encode(&StatePart {
            workers: vec![],
            ..part()
        });
        let at = bytes.len() - 8;
        bytes[at..].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&bytes).unwrap_err().contains("cannot fit"));
    }

    #[test]
    fn a_parameter_mismatch_names_the_parameter() {
        let here = r#"{"params":{"seed":2,"topics":4},"dataset":{"docs":5}}"#;
        let found = r#"{"params":{"seed":1,"topics":4},"dataset":{"docs":5}}"#;
        assert_eq!(
            run_mismatch(found, here),
            "written with params seed = 1, this run has 2"
        );
    }
}
