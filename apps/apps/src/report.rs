//! [`RunReport`]: what one app run cost and achieved, as the CLI prints it and writes it
//! as JSON (`--json`).
//!
//! The JSON object has the keys `iterstore_version`, `command_line`, `input` and
//! `started_at` (RFC 3339 UTC) when the CLI recorded them ([`Provenance`]), then `app`,
//! `objective_name`, `mode`, `workers`, `shards`,
//! `staleness` (a number, or `"async"`), `yield_waits`, `slab_stores`, `setup_s`, `preprocess_s` (virtual iteration; 0 in
//! other modes), `specialize_s` (plan building), `init_s`, `iterations` (a list of `{iter, seconds, objective}`, plus
//! `test_rmse` for MF), `dataset` (sizes), `params` (the app's hyper-parameters) and
//! `pattern` (the virtual iteration's access-pattern size, or `null`), `store` (how the
//! store served accesses: [`StoreReport`]) and `memory` (resident memory and the
//! specialized state's bytes by part: [`MemoryReport`]); each iteration also carries
//! `rss_bytes`, the process's resident memory after it. Times are rounded
//! to the nanosecond and `f32` parameters written at `f32` precision (`0.003`, not
//! `0.003000000026077032`). This module knows nothing of how the numbers were measured.

use std::collections::BTreeMap;

use iterstore::machine::Pinning;
use iterstore::stats::{AccessPattern, KindTraffic, NumaReport, SpecialMemory};
use iterstore::{Cluster, Staleness};
use serde::{Serialize, Serializer};

use super::AppConfig;

/// Serializes seconds rounded to the nanosecond (what the clocks resolve), so that a sum
/// or mean does not print as `0.015763634800000002`.
fn ns_seconds<S: Serializer>(s: &f64, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_f64(round_ns(*s))
}

/// `s` rounded to the nearest nanosecond (unchanged if not finite).
fn round_ns(s: f64) -> f64 {
    if s.is_finite() {
        (s * 1e9).round() / 1e9
    } else {
        s
    }
}

/// A value of [`RunReport::params`]: converts into JSON keeping what the value means, so
/// an `f32` is written as its shortest `f32` decimal (`0.003`), not as the `f64` it
/// widens to (`0.003000000026077032`).
pub trait ParamValue {
    /// The value as JSON.
    fn into_json(self) -> serde_json::Value;
}

impl ParamValue for f32 {
    fn into_json(self) -> serde_json::Value {
        // The shortest decimal that reads back as this f32, read as an f64.
        let shortest: f64 = self.to_string().parse().unwrap_or(f64::from(self));
        serde_json::Value::from(shortest)
    }
}

macro_rules! param_value_via_from {
    ($($t:ty),*) => {$(
        impl ParamValue for $t {
            fn into_json(self) -> serde_json::Value {
                serde_json::Value::from(self)
            }
        }
    )*};
}

param_value_via_from!(
    f64,
    u32,
    u64,
    usize,
    i64,
    bool,
    String,
    &str,
    serde_json::Value
);

/// Where a run came from: what the CLI records in the JSON report so that it can be traced
/// and repeated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// The `iterstore` version that ran it.
    pub iterstore_version: String,
    /// The command line, quoted for a shell.
    pub command_line: String,
    /// The input: its path as given, or `synthetic <size>`.
    pub input: String,
    /// When the command started, RFC 3339 UTC.
    pub started_at: String,
}

/// One iteration's time and objective.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IterRecord {
    /// 0-based iteration index.
    pub iter: usize,
    /// Wall-clock seconds of the iteration's run (evaluation excluded).
    #[serde(serialize_with = "ns_seconds")]
    pub seconds: f64,
    /// The objective after the iteration: training RMSE (MF), log-likelihood (LDA) or L1
    /// change of the ranks (PageRank).
    pub objective: f64,
    /// RMSE on the held-out ratings (MF with a test set only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_rmse: Option<f64>,
    /// The fraction of test samples classified right after the iteration (the DNN and
    /// logreg with test data, on iterations that evaluate; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_accuracy: Option<f64>,
    /// The process's resident memory after the iteration (set by
    /// [`RunReport::push_iteration`]; `None` where it cannot be read).
    pub rss_bytes: Option<u64>,
    /// Bytes the cluster's processes sent each other during the iteration's run, summed
    /// over processes (0 in one process).
    pub bytes_sent: u64,
    /// Messages (frames) they sent each other, summed over processes.
    pub messages_sent: u64,
}

/// How the store served the run's accesses ([`iterstore::stats::Stats`]): a specialized run that
/// silently fell back to slower paths shows here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct StoreReport {
    /// Rows fetched one by one through the generic path.
    pub row_fetches: u64,
    /// Arena refresh requests sent.
    pub arena_refreshes: u64,
    /// Batched refreshes of one clock's chunks (see `iterstore::stats::Stats::clock_refreshes`).
    pub clock_refreshes: u64,
    /// Rows in the specialized plan's arena.
    pub planned_rows: usize,
    /// Of those, rows of tables with a server-side update rule.
    pub planned_rule_rows: usize,
    /// Per-thread copies of contended rows, summed over workers.
    pub thread_cached_rows: usize,
    /// Workers keeping views of the rows they update (those reading them more than once
    /// a clock; `iterstore::stats::Stats::view_workers`).
    pub view_workers: usize,
    /// Accesses found as the next step of a worker's op tape (the fast path).
    pub tape_accesses: u64,
    /// Accesses found through the plan's index: they deviated from the gathered pattern,
    /// or ran past a tape truncated to the memory budget. The initialisation run is not
    /// counted (it writes each row once rather than following the iteration's pattern).
    pub indexed_accesses: u64,
    /// Accesses of rows the plan does not hold, served generically.
    pub unplanned_accesses: u64,
    /// Accesses left off the op tapes to stay within the memory budget.
    pub tape_truncated: u64,
    /// Arena chunks this process received whole.
    pub whole_chunk_refreshes: u64,
    /// Arena chunks received as only the rows changed since this process's last copy.
    pub partial_chunk_refreshes: u64,
    /// Of those chunk refreshes, the ones this process's own shards wrote straight into
    /// its arena (no message, one copy).
    pub local_chunk_refreshes: u64,
    /// Update slabs this process's workers sent whole.
    pub whole_slabs: u64,
    /// Update slabs sent as only the touched rows.
    pub partial_slabs: u64,
    /// Of the update slabs, those written with streaming stores (`--slab-stores`).
    pub streamed_slabs: u64,
    /// `read_update`s served on the fast path (rows lent, no copy).
    pub lent_read_updates: u64,
    /// `read_update`s that took the general path (a view to refresh, or off the pattern).
    pub copied_read_updates: u64,
    /// Bytes this process sent to the cluster's other processes (0 in one process).
    pub bytes_sent: u64,
    /// Bytes this process received from the other processes.
    pub bytes_received: u64,
    /// Frames (messages and heartbeats) this process sent to the other processes.
    pub frames_sent: u64,
    /// Frames this process received from the other processes.
    pub frames_received: u64,
    /// Sends that waited for a slow peer to read (its queue, `--send-queue` bytes, was full).
    pub send_waits: u64,
    /// The most bytes ever queued for one peer.
    pub peak_queued_bytes: u64,
}

/// Memory: what the process had resident, and what the specialized state holds by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct MemoryReport {
    /// The most the process had resident, from its start to the end of the run (`VmHWM`).
    pub peak_rss_bytes: Option<u64>,
    /// The median of the iterations' `rss_bytes`: what the run holds while iterating.
    pub steady_rss_bytes: Option<u64>,
    /// Bytes of each part of the specialized state ([`iterstore::stats::SpecialMemory`]; all
    /// zeros in generic mode).
    pub special: SpecialMemory,
}

/// The size of the access pattern a virtual iteration gathered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PatternSummary {
    /// Distinct rows touched in one iteration.
    pub rows: usize,
    /// READs and UPDATEs in one iteration, all workers together.
    pub accesses: u64,
    /// CLOCKs per iteration.
    pub clocks: u64,
}

impl From<&AccessPattern> for PatternSummary {
    fn from(p: &AccessPattern) -> Self {
        Self {
            rows: p.rows().len(),
            accesses: p.accesses(),
            clocks: p.clocks(),
        }
    }
}

/// What one app run cost and achieved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// Version, command line, input and start time, when the CLI recorded them (their keys
    /// then come first in the JSON object).
    #[serde(flatten)]
    pub provenance: Option<Provenance>,
    /// `mf`, `lda`, `pagerank` or `dnn`.
    pub app: &'static str,
    /// What `objective` means: `train_rmse`, `log_likelihood`, `l1_change` or
    /// `train_cross_entropy` (the DNN's mean training loss over the epoch).
    pub objective_name: &'static str,
    /// Store mode (`generic`, `first-iter`, `virtual`).
    pub mode: &'static str,
    /// Worker threads per process.
    pub workers: usize,
    /// Processes in the cluster (each with `workers` workers).
    pub processes: usize,
    /// Server shards.
    pub shards: usize,
    /// Staleness bound.
    #[serde(serialize_with = "staleness_json")]
    pub staleness: Staleness,
    /// Whether waiting threads yielded before they slept (`--yield-waits`).
    pub yield_waits: bool,
    /// How specialized workers wrote their update slabs (`--slab-stores`).
    #[serde(serialize_with = "slab_stores_json")]
    pub slab_stores: iterstore::SlabStores,
    /// Seconds to partition the data, start the cluster and create the tables.
    #[serde(serialize_with = "ns_seconds")]
    pub setup_s: f64,
    /// Seconds of the virtual iteration (pattern gathering); 0 outside virtual mode.
    #[serde(serialize_with = "ns_seconds")]
    pub preprocess_s: f64,
    /// Seconds the store spent building its plan from the gathered pattern and switching
    /// to it: part of `preprocess_s` in virtual mode, part of the first iteration in
    /// first-iter mode, 0 in generic mode.
    #[serde(serialize_with = "ns_seconds")]
    pub specialize_s: f64,
    /// Seconds of the initialisation run.
    #[serde(serialize_with = "ns_seconds")]
    pub init_s: f64,
    /// Every iteration, in order.
    pub iterations: Vec<IterRecord>,
    /// Dataset sizes (e.g. `users`, `train_ratings`, `vertices`, `edges`).
    pub dataset: BTreeMap<&'static str, u64>,
    /// The app's hyper-parameters.
    pub params: BTreeMap<&'static str, serde_json::Value>,
    /// The gathered access pattern's size (virtual mode only).
    pub pattern: Option<PatternSummary>,
    /// How the store served accesses.
    pub store: StoreReport,
    /// What the store could not do as asked (`iterstore::Cluster::diagnostics`); absent
    /// from the JSON when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<String>,
    /// Resident memory and the specialized state's size.
    pub memory: MemoryReport,
    /// The NUMA placement ([`iterstore::stats::NumaReport`]: where workers ran, what went in
    /// each zone, the expected fraction of accesses to another zone against hash
    /// placement with unpinned threads); `null` in generic mode or with `numa` off.
    pub numa: Option<NumaReport>,
    /// This process's network traffic by kind of protocol message
    /// ([`iterstore::Cluster::traffic`]); empty in one process.
    pub traffic: Vec<KindTraffic>,
    /// The checkpoints the run wrote (`null` without `--checkpoint-dir`).
    pub checkpoints: Option<CheckpointReport>,
    /// The checkpoint the run resumed from (`null` if it started afresh).
    pub resumed: Option<ResumeReport>,
    /// The automatic restarts this process went through before the run succeeded (the
    /// CLI's `--restarts`), in order; empty when none was needed.
    pub restarts: Vec<RestartReport>,
    /// The fraction of test samples classified right after the last iteration (the DNN
    /// with test images only; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_accuracy: Option<f64>,
    /// The test accuracy after each iteration (the DNN with test images only; absent
    /// otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub test_accuracy_per_iteration: Vec<f64>,
    /// Bytes of UPDATEs sent, by table ([`iterstore::Cluster::update_bytes`]: rows sent
    /// the generic way, planned rows in slabs and rank-k updates as factors):
    /// this process's workers', the DNN's weight tables summed over the cluster; absent
    /// when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub update_bytes: Vec<iterstore::stats::TableUpdates>,
    /// What the DNN's epoch quorum did (`--epoch-quorum`; absent without).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch_quorum: Option<QuorumReport>,
    /// Work units over the run as their coordinator saw them (logreg's L-BFGS, on rank
    /// 0 only): per worker the units it did first, the ones it finished after another
    /// and the ones it abandoned, and the backups handed out; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_units: Option<iterstore::units::UnitsReport>,
}

/// What an epoch quorum did: per epoch, the replicas it stopped before their share was
/// done and the samples they carried into their next epoch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuorumReport {
    /// The fraction of replicas whose finished shares end an epoch.
    pub fraction: f64,
    /// That many replicas.
    pub replicas_needed: usize,
    /// The run's epochs (0-based, as the iterations), in order.
    pub epochs: Vec<usize>,
    /// Per epoch: samples the replicas processed (with `carried_samples`, the training
    /// set).
    pub processed_samples: Vec<u64>,
    /// Per epoch: replicas stopped before their share was done.
    pub cut_replicas: Vec<usize>,
    /// Per epoch: the samples those replicas had not reached (first in their next epoch).
    pub carried_samples: Vec<u64>,
    /// Epochs the quorum ended early (some replica was stopped).
    pub cut_epochs: usize,
    /// Samples carried over all epochs.
    pub total_carried_samples: u64,
}

impl QuorumReport {
    /// A quorum of `replicas_needed` replicas, `fraction` of them, before any epoch.
    pub fn new(fraction: f32, replicas_needed: usize) -> Self {
        Self {
            fraction: f64::from(fraction),
            replicas_needed,
            epochs: Vec::new(),
            processed_samples: Vec::new(),
            cut_replicas: Vec::new(),
            carried_samples: Vec::new(),
            cut_epochs: 0,
            total_carried_samples: 0,
        }
    }

    /// Records epoch `epoch`: `processed` samples, `cut` replicas stopped early, carrying
    /// `carried` samples.
    pub fn push_epoch(&mut self, epoch: usize, processed: u64, cut: usize, carried: u64) {
        self.epochs.push(epoch);
        self.processed_samples.push(processed);
        self.cut_replicas.push(cut);
        self.carried_samples.push(carried);
        self.cut_epochs += usize::from(cut > 0);
        self.total_carried_samples += carried;
    }
}

/// The checkpoints a run wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointReport {
    /// The checkpoint directory.
    pub dir: String,
    /// A checkpoint after every `every`-th iteration.
    pub every: usize,
    /// Checkpoints written by this run.
    pub written: usize,
    /// Seconds spent writing them (not part of any iteration's time).
    #[serde(serialize_with = "ns_seconds")]
    pub seconds: f64,
}

/// The checkpoint a run resumed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumeReport {
    /// The checkpoint's directory (`<dir>/ckpt-<clock>`), or, after a loss survived
    /// from replicated shards, `the replicated shards at clock C`.
    pub checkpoint: String,
    /// Iterations the checkpoint held: the run's first iteration is this one (0-based),
    /// and the initialisation did not run again.
    pub iteration: usize,
}

/// One automatic restart of a run (the CLI's `--restarts`): the process that was lost,
/// the checkpoint the cluster went on from and what the loss cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestartReport {
    /// The rank of the process that was lost.
    pub lost: usize,
    /// The error that ended the attempt (it names the lost process).
    pub error: String,
    /// The clock of the newest complete checkpoint when this process rejoined: the
    /// cluster continues from it (`null`: none yet, the run started again from the
    /// beginning; and with replicated shards, which the run continues from instead: the
    /// report's `resumed` names their clock).
    pub resumed_from_clock: Option<u64>,
    /// Seconds the failed attempt had run when the loss ended it.
    pub seconds: f64,
    /// Seconds waited before rejoining (the backoff).
    pub backoff_s: f64,
}

fn staleness_json<S: Serializer>(s: &Staleness, ser: S) -> Result<S::Ok, S::Error> {
    match s {
        Staleness::Bounded(n) => ser.serialize_u32(*n),
        Staleness::Unbounded => ser.serialize_str("async"),
    }
}

fn slab_stores_json<S: Serializer>(s: &iterstore::SlabStores, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(match s {
        iterstore::SlabStores::Plain => "plain",
        iterstore::SlabStores::Streaming => "streaming",
        iterstore::SlabStores::Auto => "auto",
    })
}

impl RunReport {
    /// An empty report of `app` run with `cfg`.
    pub fn new(app: &'static str, objective_name: &'static str, cfg: &AppConfig) -> Self {
        Self {
            provenance: None,
            app,
            objective_name,
            mode: cfg.mode.name(),
            workers: cfg.workers,
            processes: 1, // the app sets its cluster's
            shards: cfg.shards,
            staleness: cfg.staleness,
            yield_waits: cfg.yield_waits,
            slab_stores: cfg.slab_stores,
            setup_s: 0.0,
            preprocess_s: 0.0,
            specialize_s: 0.0,
            init_s: 0.0,
            // Room for the usual run; a run of a billion iterations grows it as it goes.
            iterations: Vec::with_capacity(cfg.iterations.min(1024)),
            dataset: BTreeMap::new(),
            params: BTreeMap::new(),
            pattern: None,
            store: StoreReport::default(),
            diagnostics: Vec::new(),
            memory: MemoryReport::default(),
            numa: None,
            traffic: Vec::new(),
            checkpoints: cfg.checkpoint.as_ref().map(|c| CheckpointReport {
                dir: c.dir.display().to_string(),
                every: c.every,
                written: 0,
                seconds: 0.0,
            }),
            resumed: None,
            restarts: Vec::new(),
            test_accuracy: None,
            test_accuracy_per_iteration: Vec::new(),
            update_bytes: Vec::new(),
            epoch_quorum: None,
            work_units: None,
        }
    }

    /// Records the test accuracy after each iteration; the last is `test_accuracy`.
    pub fn set_test_accuracy(&mut self, per_iteration: Vec<f64>) {
        self.test_accuracy = per_iteration.last().copied();
        self.test_accuracy_per_iteration = per_iteration;
    }

    /// Records a finished iteration: notes the process's resident memory in it, hands it
    /// to `observer` and appends it.
    pub fn push_iteration(
        &mut self,
        mut record: IterRecord,
        observer: &mut dyn FnMut(&IterRecord),
    ) {
        record.rss_bytes = super::rss::resident_bytes();
        observer(&record);
        self.iterations.push(record);
    }

    /// Records what the store reports at the end of the run: plan-building time, how
    /// accesses were served, the specialized state's bytes, the NUMA placement, and the
    /// process's peak and steady resident memory.
    pub fn record_store(&mut self, cluster: &Cluster) {
        let stats = &cluster.stats();
        self.numa = cluster.numa();
        self.traffic = cluster.traffic();
        self.update_bytes = cluster.update_bytes();
        self.specialize_s = stats.specialize_time.as_secs_f64();
        self.diagnostics = cluster.diagnostics();
        self.store = StoreReport {
            row_fetches: stats.row_fetches,
            arena_refreshes: stats.arena_refreshes,
            clock_refreshes: stats.clock_refreshes,
            planned_rows: stats.planned_rows,
            planned_rule_rows: stats.planned_rule_rows,
            thread_cached_rows: stats.thread_cached_rows,
            view_workers: stats.view_workers,
            tape_accesses: stats.tape_accesses,
            indexed_accesses: stats.indexed_accesses,
            unplanned_accesses: stats.unplanned_accesses,
            tape_truncated: stats.tape_truncated,
            whole_chunk_refreshes: stats.whole_chunk_refreshes,
            partial_chunk_refreshes: stats.partial_chunk_refreshes,
            local_chunk_refreshes: stats.local_chunk_refreshes,
            whole_slabs: stats.whole_slabs,
            partial_slabs: stats.partial_slabs,
            streamed_slabs: stats.streamed_slabs,
            lent_read_updates: stats.lent_read_updates,
            copied_read_updates: stats.copied_read_updates,
            bytes_sent: stats.bytes_sent,
            bytes_received: stats.bytes_received,
            frames_sent: stats.frames_sent,
            frames_received: stats.frames_received,
            send_waits: stats.send_waits,
            peak_queued_bytes: stats.peak_queued_bytes,
        };
        let mut rss: Vec<u64> = self.iterations.iter().filter_map(|r| r.rss_bytes).collect();
        rss.sort_unstable();
        self.memory = MemoryReport {
            peak_rss_bytes: super::rss::peak_resident_bytes(),
            steady_rss_bytes: rss.get(rss.len() / 2).copied(),
            special: stats.memory,
        };
    }

    /// Records where the run came from ([`Provenance`]): the `iterstore` version, the
    /// command line, the input (a path or `synthetic <size>`) and the start time (RFC 3339
    /// UTC).
    pub fn set_provenance(
        &mut self,
        iterstore_version: &str,
        command_line: &str,
        input: &str,
        started_at: &str,
    ) {
        self.provenance = Some(Provenance {
            iterstore_version: iterstore_version.into(),
            command_line: command_line.into(),
            input: input.into(),
            started_at: started_at.into(),
        });
    }

    /// Records a parameter.
    pub fn param(&mut self, name: &'static str, value: impl ParamValue) {
        self.params.insert(name, value.into_json());
    }

    /// The objective after the last iteration.
    pub fn final_objective(&self) -> Option<f64> {
        self.iterations.last().map(|r| r.objective)
    }

    /// Mean seconds per iteration (0 when there were none).
    pub fn mean_iteration_s(&self) -> f64 {
        if self.iterations.is_empty() {
            return 0.0;
        }
        self.iterations.iter().map(|r| r.seconds).sum::<f64>() / self.iterations.len() as f64
    }

    /// The report as one pretty-printed JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }

    /// A human-readable objective, e.g. `train RMSE 0.3012 (test 0.3350)`.
    pub fn objective_text(&self) -> String {
        let Some(last) = self.iterations.last() else {
            return "no iterations".into();
        };
        let main = match self.objective_name {
            "train_rmse" => format!("train RMSE {:.4}", last.objective),
            "log_likelihood" => format!("log-likelihood {:.6e}", last.objective),
            "l1_change" => format!("L1 change {:.3e}", last.objective),
            "train_cross_entropy" => format!("train cross-entropy {:.4}", last.objective),
            other => format!("{other} {}", last.objective),
        };
        match (last.test_rmse, self.test_accuracy) {
            (Some(t), _) => format!("{main} (test {t:.4})"),
            (None, Some(a)) => format!("{main} (test accuracy {:.2} %)", 100.0 * a),
            (None, None) => main,
        }
    }

    /// A short multi-line summary for a terminal.
    pub fn summary(&self) -> String {
        let staleness = match self.staleness {
            Staleness::Bounded(n) => n.to_string(),
            Staleness::Unbounded => "async".into(),
        };
        let data: Vec<String> = self
            .dataset
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let cluster = if self.processes > 1 {
            format!(
                " per process x {} processes; network: {:.1} MB sent, {:.1} MB received by this process",
                self.processes,
                self.store.bytes_sent as f64 / 1e6,
                self.store.bytes_received as f64 / 1e6
            )
        } else {
            String::new()
        };
        format!(
            "{app}: {iters} iterations, mode {mode}, {w} workers, {s} shard(s){cluster}, staleness {staleness}\n\
             data: {data}\n\
             final {objective}\n\
             mean iteration {mean:.4} s; setup {setup:.3} s, preprocess {pre:.3} s, init {init:.3} s",
            app = self.app,
            iters = self.iterations.len(),
            mode = self.mode,
            w = self.workers,
            s = self.shards,
            data = data.join(", "),
            objective = self.objective_text(),
            mean = self.mean_iteration_s(),
            setup = self.setup_s,
            pre = self.preprocess_s,
            init = self.init_s,
        ) + &self.checkpoint_summary()
            + &self.quorum_summary()
            + &self.units_summary()
            + &self.store_summary()
            + &self.numa_summary()
    }

    /// A line on who computed the work units (on the coordinating process); empty
    /// without them.
    fn units_summary(&self) -> String {
        let Some(u) = &self.work_units else {
            return String::new();
        };
        // Worker 0 coordinates and computes only when it is the only worker.
        let from = usize::from(u.done.len() > 1);
        let list = |v: &[u64]| {
            let shown: Vec<String> = v.iter().skip(from).map(u64::to_string).collect();
            shown.join(" ")
        };
        let mut line = format!(
            "\nwork units by worker {from}..: done [{}], backups {}",
            list(&u.done),
            u.backups
        );
        for (what, v) in [
            ("duplicated", &u.duplicated),
            ("abandoned", &u.abandoned),
            ("passed over (too slow)", &u.passed_over),
        ] {
            if v.iter().any(|&n| n > 0) {
                line += &format!(", {what} [{}]", list(v));
            }
        }
        line
    }

    /// A line on what the epoch quorum did; empty without one.
    fn quorum_summary(&self) -> String {
        let Some(q) = &self.epoch_quorum else {
            return String::new();
        };
        format!(
            "\nepoch quorum {} ({} replicas): {} of {} epochs ended before every replica \
             finished, {} samples carried into the next epoch",
            q.fraction,
            q.replicas_needed,
            q.cut_epochs,
            q.epochs.len(),
            q.total_carried_samples
        )
    }

    /// A line on the checkpoint the run resumed from and the ones it wrote; empty when
    /// neither.
    fn checkpoint_summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = &self.resumed {
            parts.push(format!(
                "resumed from {} after iteration {}",
                r.checkpoint, r.iteration
            ));
        }
        if let Some(c) = &self.checkpoints {
            parts.push(format!(
                "{} checkpoint(s) written to {} in {:.3} s",
                c.written, c.dir, c.seconds
            ));
        }
        if parts.is_empty() {
            return String::new();
        }
        format!("\ncheckpoints: {}", parts.join("; "))
    }

    /// Records a checkpoint written in `seconds`.
    pub(crate) fn record_checkpoint(&mut self, seconds: Option<f64>) {
        if let (Some(c), Some(s)) = (&mut self.checkpoints, seconds) {
            c.written += 1;
            c.seconds += s;
        }
    }

    /// With NUMA placement, a line on where workers ran and what the placement buys;
    /// empty otherwise.
    fn numa_summary(&self) -> String {
        let Some(n) = &self.numa else {
            return String::new();
        };
        let pct = |f: Option<f64>| f.map_or("–".to_string(), |f| format!("{:.1}%", 100.0 * f));
        let mb: Vec<String> = n
            .bytes_per_zone
            .iter()
            .map(|b| format!("{:.1}", *b as f64 / 1e6))
            .collect();
        format!(
            "\nnuma: {topology}, {zones} zone(s), {bound}; workers on cores {cores:?} (zones \
             {wz:?}); accesses to another zone: {plan} planned against {base} with hash \
             placement and unpinned threads; MB per zone [{mb}], shards in zones {sz:?}, \
             arena bound {ab:.1} MB",
            sz = n.shard_zones,
            ab = n.arena_bound_bytes as f64 / 1e6,
            topology = n.topology,
            zones = n.zones,
            bound = match (n.bound, n.pinning) {
                (true, Pinning::Cores) => "each worker bound to its core",
                (true, _) => "each worker bound to its zone's CPUs",
                (false, Pinning::Zones) if n.zones == 1 => {
                    "one zone: threads not bound (--pin cores binds workers to cores)"
                }
                (false, _) => "plan only, nothing bound",
            },
            cores = n.worker_cores,
            wz = n.worker_zones,
            plan = pct(n.remote_fraction),
            base = pct(n.baseline_remote_fraction),
            mb = mb.join(", "),
        )
    }

    /// In a specialized run, a line on how accesses were served and what the specialized
    /// state holds; empty in generic mode.
    fn store_summary(&self) -> String {
        let st = &self.store;
        let served = st.tape_accesses + st.indexed_accesses + st.unplanned_accesses;
        if served == 0 {
            return String::new();
        }
        let pct = |n: u64| 100.0 * n as f64 / served as f64;
        let mb = |b: usize| b as f64 / 1e6;
        let m = &self.memory.special;
        let mut line = format!(
            "\nstore: {:.1}% of accesses on the op tape, {:.1}% indexed (off the pattern), \
             {:.1}% generic (unplanned rows); specialized state {:.1} MB (tapes {:.1} MB)",
            pct(st.tape_accesses),
            pct(st.indexed_accesses),
            pct(st.unplanned_accesses),
            mb(m.current()),
            mb(m.tapes),
        );
        if let Some(peak) = self.memory.peak_rss_bytes {
            line += &format!(", peak RSS {:.1} MB", peak as f64 / 1e6);
        }
        if st.planned_rows > 0 {
            line += &format!(
                "; views of updated rows for {} of {} workers (the others read theirs at most \
                 once a clock)",
                st.view_workers, self.workers
            );
        }
        let read_updates = st.lent_read_updates + st.copied_read_updates;
        if read_updates > 0 {
            line += &format!(
                "\nstore: {:.1}% of read_updates lent their rows (the rest refreshed a view \
                 first or were off the pattern)",
                100.0 * st.lent_read_updates as f64 / read_updates as f64
            );
        }
        if st.tape_truncated > 0 {
            line += &format!(
                "\nstore: {} accesses per iteration are off the op tapes to fit the memory budget",
                st.tape_truncated
            );
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_a_billion_iterations_does_not_reserve_them_up_front() {
        // It used to reserve one record per iteration at once: 72 GB, and an abort.
        let cfg = AppConfig {
            iterations: 1_000_000_000,
            ..AppConfig::default()
        };
        let report = RunReport::new("mf", "train_rmse", &cfg);
        assert!(report.iterations.capacity() <= 1024);
    }

    #[test]
    fn json_has_the_contract_keys() {
        let mut r = RunReport::new("mf", "train_rmse", &AppConfig::default());
        r.iterations.push(IterRecord {
            iter: 0,
            seconds: 0.5,
            objective: 1.0,
            test_rmse: Some(1.5),
            test_accuracy: None,
            rss_bytes: None,
            bytes_sent: 0,
            messages_sent: 0,
        });
        r.iterations.push(IterRecord {
            iter: 1,
            seconds: 1.5,
            objective: 0.5,
            test_rmse: Some(0.7),
            test_accuracy: None,
            rss_bytes: None,
            bytes_sent: 0,
            messages_sent: 0,
        });
        r.dataset.insert("users", 3);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        for key in [
            "app",
            "mode",
            "workers",
            "staleness",
            "preprocess_s",
            "init_s",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["mode"], "virtual");
        assert_eq!(v["staleness"], 0);
        assert_eq!(v["iterations"][1]["test_rmse"], 0.7);
        assert_eq!(v["dataset"]["users"], 3);
        assert_eq!(r.mean_iteration_s(), 1.0);
        assert!(r.summary().contains("test 0.7000"), "{}", r.summary());
        assert!(v.get("command_line").is_none(), "no provenance recorded");
        r.staleness = Staleness::Unbounded;
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["staleness"], "async");
    }

    /// The store's diagnostics reach the run JSON, and only when there are some.
    #[test]
    fn diagnostics_reach_the_json_only_when_there_are_some() {
        let mut cluster = Cluster::start(iterstore::Config::new(1)).unwrap();
        let t = cluster.create_table::<f32>("t", 1).unwrap();
        let mut r = RunReport::new("mf", "train_rmse", &AppConfig::default());
        r.record_store(&cluster);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert!(v.get("diagnostics").is_none(), "{v}");
        // A virtual iteration in generic mode specializes nothing: said.
        cluster
            .virtual_iteration(|w| {
                w.update(&t, 0, &[1.0])?;
                w.clock()
            })
            .unwrap();
        r.record_store(&cluster);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        let said = v["diagnostics"].as_array().unwrap();
        assert_eq!(said.len(), 1, "{v}");
        assert!(said[0].as_str().unwrap().contains("specializes nothing"));
        cluster.shutdown().unwrap();
    }

    #[test]
    fn floats_print_without_noise_and_provenance_comes_first() {
        let mut r = RunReport::new("mf", "train_rmse", &AppConfig::default());
        r.param("learning_rate", 0.003f32);
        r.param("damping", 0.85f64);
        r.param("rank", 16usize);
        r.init_s = 0.1 + 0.2;
        r.iterations.push(IterRecord {
            iter: 0,
            seconds: 0.015763634800000002,
            objective: 1.0,
            test_rmse: None,
            test_accuracy: None,
            rss_bytes: None,
            bytes_sent: 0,
            messages_sent: 0,
        });
        r.set_provenance(
            "0.1.0",
            "iterstore run mf",
            "synthetic tiny",
            "2026-01-31T12:00:00Z",
        );
        let json = r.to_json();
        for text in [
            "\"learning_rate\": 0.003,",
            "\"damping\": 0.85,",
            "\"init_s\": 0.3,",
            "\"seconds\": 0.015763635,",
        ] {
            assert!(json.contains(text), "{text} not in {json}");
        }
        let keys: Vec<&str> = json
            .lines()
            .skip(1)
            .take(5)
            .map(|l| l.trim().split('"').nth(1).unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "iterstore_version",
                "command_line",
                "input",
                "started_at",
                "app"
            ]
        );
    }
}
