//! The Prometheus endpoint ([`Config::metrics_addr`]): what a running process shows about
//! itself while it runs, read at scrape time from counters kept elsewhere, and the few
//! it keeps itself ([`ProcessMetrics`]: runs, their durations and barrier waits,
//! checkpoint durations).
//!
//! Every metric is named `iterstore_*` in Prometheus's conventions (base units in the
//! name, `_total` on counters) and encoded by `prometheus-client`, in OpenMetrics text
//! when the scraper asks for it and in the Prometheus text format 0.0.4 otherwise:
//!
//! | metric | type | labels | from |
//! |---|---|---|---|
//! | `iterstore_process_rank` | gauge | | the process's rank |
//! | `iterstore_worker_clock` | gauge | `worker` | each local worker's clock ([`LiveWorkers`]) |
//! | `iterstore_worker_clock_lag` | gauge | `worker` | clocks behind this process's fastest worker |
//! | `iterstore_worker_staleness_wait_seconds_total` | counter | `worker` | time its reads waited for a row fresh enough |
//! | `iterstore_data_clock` | gauge | | the newest data clock replies carried |
//! | `iterstore_runs_total` | counter | | runs ended at the run barrier |
//! | `iterstore_run_duration_seconds` | histogram | | a run, from its start to the end of its barrier |
//! | `iterstore_run_barrier_wait_seconds_total` | counter | | time at the run barrier |
//! | `iterstore_checkpoint_duration_seconds` | histogram | | a checkpoint, until every process knows its outcome |
//! | `iterstore_accesses_total` | counter | `path` | specialized accesses by `tape`, `indexed`, `unplanned` (at each run's end) |
//! | `iterstore_branch_ops_total` | counter | `op` | branch ops this process took part in: `fork`, `switch`, `free`, `park`, `unpark` |
//! | `iterstore_branches` | gauge | | branches alive (in memory or parked) |
//! | `iterstore_live_branch` | gauge | | the branch runs train |
//! | `iterstore_peer_{sent,received}_bytes_total` | counter | `peer` | bytes written to and read from each other process |
//! | `iterstore_peer_{sent,received}_frames_total` | counter | `peer` | frames written and read |
//! | `iterstore_peer_queued_bytes` | gauge | `peer` | bytes queued for a peer now |
//!
//! The `peer_*` metrics exist only for processes joined over TCP. Serving is `http`'s: one
//! thread, one request per connection. This module adds nothing to the hot path: workers
//! store their clock at each CLOCK and add to their wait only when a read had to wait.
//!
//! [`Config::metrics_addr`]: crate::config::Config::metrics_addr

mod http;

pub(super) use http::MetricsServer;

use super::branches::BranchCounts;
use crate::client::{ClientShared, LiveWorkers};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::net::shared::PeerTraffic;
use crate::transport::Transport;
use crate::worker::AccessCounters;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What the cluster measures itself for the endpoint: its runs and checkpoints. Kept
/// whether or not an endpoint serves them (a few atomic adds per run).
#[derive(Debug)]
pub(super) struct ProcessMetrics {
    /// Runs ended at the run barrier.
    runs: Counter,
    /// Each run's time, from its start to the end of its barrier.
    run_seconds: Histogram,
    /// Time spent at the run barrier, in total.
    barrier_wait: Counter<f64, AtomicU64>,
    /// Each checkpoint's time.
    checkpoint_seconds: Histogram,
    /// Specialized accesses by path (tape, indexed, unplanned), as of the last run's end.
    accesses: [AtomicU64; 3],
    /// Branch ops by kind ([`BRANCH_OPS`]), branches alive and the live one, as of the
    /// last op.
    branch_ops: [AtomicU64; 5],
    branches: AtomicU64,
    live_branch: AtomicU64,
}

/// The `op` labels of `iterstore_branch_ops_total`, in [`BranchCounts`]' order.
const BRANCH_OPS: [&str; 5] = ["fork", "switch", "free", "park", "unpark"];

impl Default for ProcessMetrics {
    fn default() -> Self {
        ProcessMetrics {
            runs: Counter::default(),
            // 1 ms to about 4 min.
            run_seconds: Histogram::new(exponential_buckets(0.001, 4.0, 10)),
            barrier_wait: Counter::default(),
            // 10 ms to about 11 min.
            checkpoint_seconds: Histogram::new(exponential_buckets(0.01, 4.0, 9)),
            accesses: Default::default(),
            branch_ops: Default::default(),
            // Branch 0, live: every cluster starts with it.
            branches: AtomicU64::new(1),
            live_branch: AtomicU64::new(0),
        }
    }
}

impl ProcessMetrics {
    /// A run that began at `began` passed its barrier, which it reached at `at_barrier`;
    /// `counters` are the specialized accesses of every run so far.
    pub(super) fn run_ended(&self, began: Instant, at_barrier: Instant, counters: &AccessCounters) {
        self.runs.inc();
        self.run_seconds.observe(began.elapsed().as_secs_f64());
        self.barrier_wait.inc_by(at_barrier.elapsed().as_secs_f64());
        for (total, n) in
            self.accesses
                .iter()
                .zip([counters.tape, counters.indexed, counters.unplanned])
        {
            total.store(n, Ordering::Relaxed);
        }
    }

    /// A branch op ended: `counts` of every op so far, `branches` alive, `live` the live
    /// branch.
    pub(super) fn branches_changed(&self, counts: &BranchCounts, branches: usize, live: u32) {
        let ops = [
            counts.forks,
            counts.switches,
            counts.frees,
            counts.parks,
            counts.unparks,
        ];
        for (total, n) in self.branch_ops.iter().zip(ops) {
            total.store(n, Ordering::Relaxed);
        }
        self.branches.store(branches as u64, Ordering::Relaxed);
        self.live_branch.store(u64::from(live), Ordering::Relaxed);
    }

    /// A checkpoint that began at `began` is complete.
    pub(super) fn checkpointed(&self, began: Instant) {
        self.checkpoint_seconds
            .observe(began.elapsed().as_secs_f64());
    }
}

/// Binds the metrics address of process `rank` if `config` has one: the configured port
/// plus `offset` (port 0 stays 0), so that the processes of one machine each have their
/// own. An address that cannot be bound is an error naming it.
pub(super) fn bind(config: &Config, offset: usize) -> Result<Option<TcpListener>> {
    let Some(mut addr) = config.metrics_addr else {
        return Ok(None);
    };
    if addr.port() != 0 {
        let port = u16::try_from(usize::from(addr.port()) + offset).map_err(|_| {
            Error::config(
                "metrics_addr",
                format!("port {} plus process {offset} is past 65535", addr.port()),
            )
        })?;
        addr.set_port(port);
    }
    TcpListener::bind(addr)
        .map(Some)
        .map_err(|e| Error::config("metrics_addr", format!("cannot listen on {addr}: {e}")))
}

/// The registry a process's endpoint encodes: its [`ProcessMetrics`] and a [`Scrape`] of
/// the live counters.
pub(super) fn registry(
    shared: Arc<ClientShared>,
    transport: Arc<dyn Transport>,
    process: Arc<ProcessMetrics>,
) -> Registry {
    let mut r = Registry::with_prefix("iterstore");
    r.register(
        "runs",
        "Runs ended at the run barrier",
        process.runs.clone(),
    );
    // The histograms carry their unit in their name only: some OpenMetrics parsers
    // refuse a histogram's UNIT line.
    r.register(
        "run_duration_seconds",
        "Time of a run, from its start until every process ended it (the run barrier)",
        process.run_seconds.clone(),
    );
    r.register_with_unit(
        "run_barrier_wait",
        "Time this process waited at run barriers for the other processes",
        Unit::Seconds,
        process.barrier_wait.clone(),
    );
    r.register(
        "checkpoint_duration_seconds",
        "Time of a checkpoint, until every process knew it was complete",
        process.checkpoint_seconds.clone(),
    );
    r.register_collector(Box::new(Scrape {
        shared,
        transport,
        process,
    }));
    r
}

/// The live counters, read at each scrape: workers' clocks and waits, the data clock,
/// specialized accesses, traffic by peer.
struct Scrape {
    shared: Arc<ClientShared>,
    transport: Arc<dyn Transport>,
    process: Arc<ProcessMetrics>,
}

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrape")
            .field("rank", &self.shared.process)
            .finish_non_exhaustive()
    }
}

/// Encodes one family: `name` (with `unit`, if any) of the metric type of `M`, one sample
/// per `(label value, metric)` of `samples` under label `label`.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    (name, help, unit): (&str, &str, Option<&Unit>),
    label: &str,
    samples: impl IntoIterator<Item = (String, M)>,
) -> std::fmt::Result {
    let mut samples = samples.into_iter().peekable();
    let Some((_, first)) = samples.peek() else {
        return Ok(());
    };
    let mut metric = encoder.encode_descriptor(name, help, unit, first.metric_type())?;
    for (value, m) in samples {
        m.encode(metric.encode_family(&[(label, value.as_str())])?)?;
    }
    Ok(())
}

/// Encodes one metric without labels.
fn single<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    (name, help, unit): (&str, &str, Option<&Unit>),
    m: M,
) -> std::fmt::Result {
    m.encode(encoder.encode_descriptor(name, help, unit, m.metric_type())?)
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let e = &mut encoder;
        let rank = i64::from(self.shared.process);
        single(
            e,
            ("process_rank", "This process's rank in its cluster", None),
            ConstGauge::new(rank),
        )?;
        self.workers(e, &self.shared.live)?;
        let data_clock = self.shared.known_min.load(Ordering::Relaxed);
        single(
            e,
            (
                "data_clock",
                "The newest data clock (the servers' minimum clock) replies to this process carried",
                None,
            ),
            ConstGauge::new(clamp(data_clock)),
        )?;
        let accesses = ["tape", "indexed", "unplanned"]
            .into_iter()
            .zip(&self.process.accesses)
            .map(|(path, n)| {
                (
                    path.to_string(),
                    ConstCounter::new(n.load(Ordering::Relaxed)),
                )
            });
        family(
            e,
            (
                "accesses",
                concat!(
                    "Accesses of specialized workers by how they found their row: the op tape, ",
                    "the plan's index, or the generic store (counted at each run's end)"
                ),
                None,
            ),
            "path",
            accesses,
        )?;
        let ops = BRANCH_OPS
            .iter()
            .zip(&self.process.branch_ops)
            .map(|(op, n)| (op.to_string(), ConstCounter::new(n.load(Ordering::Relaxed))));
        family(
            e,
            (
                "branch_ops",
                "Branch ops (Cluster::fork, switch, free, park, unpark) this process took part in",
                None,
            ),
            "op",
            ops,
        )?;
        let load = |a: &AtomicU64| clamp(a.load(Ordering::Relaxed));
        single(
            e,
            (
                "branches",
                "Branches of the training state alive, in memory or parked",
                None,
            ),
            ConstGauge::new(load(&self.process.branches)),
        )?;
        single(
            e,
            ("live_branch", "The branch runs train", None),
            ConstGauge::new(load(&self.process.live_branch)),
        )?;
        self.peers(e)
    }
}

impl Scrape {
    /// The workers' clocks, lags and waits.
    fn workers(&self, e: &mut DescriptorEncoder<'_>, live: &LiveWorkers) -> std::fmt::Result {
        let workers = live.snapshot();
        let fastest = workers.iter().map(|w| w.clock).max().unwrap_or(0);
        let by_worker = |value: &dyn Fn(&crate::client::LiveWorker) -> i64| {
            workers
                .iter()
                .map(|w| (w.id.to_string(), ConstGauge::new(value(w))))
                .collect::<Vec<_>>()
        };
        family(
            e,
            (
                "worker_clock",
                "The clock a worker of this process is in",
                None,
            ),
            "worker",
            by_worker(&|w| clamp(w.clock)),
        )?;
        family(
            e,
            (
                "worker_clock_lag",
                "Clocks a worker is behind the fastest worker of this process",
                None,
            ),
            "worker",
            by_worker(&|w| clamp(fastest - w.clock)),
        )?;
        let waits = workers.iter().map(|w| {
            (
                w.id.to_string(),
                ConstCounter::new(w.read_wait.as_secs_f64()),
            )
        });
        family(
            e,
            (
                "worker_staleness_wait",
                concat!(
                    "Time a worker's reads waited for a row fresh enough for the staleness ",
                    "bound (fetches of rows not cached included)"
                ),
                Some(&Unit::Seconds),
            ),
            "worker",
            waits,
        )
    }

    /// Traffic and queues by peer (none for a transport that does not leave the process).
    fn peers(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let peers = self.transport.peer_traffic();
        let counters = |value: fn(&PeerTraffic) -> u64| {
            peers
                .iter()
                .map(move |p| (p.rank.to_string(), ConstCounter::new(value(p))))
        };
        let bytes = Some(&Unit::Bytes);
        family(
            e,
            (
                "peer_sent",
                "Bytes written to another process (frames, headers and heartbeats)",
                bytes,
            ),
            "peer",
            counters(|p| p.bytes_sent),
        )?;
        family(
            e,
            ("peer_received", "Bytes read from another process", bytes),
            "peer",
            counters(|p| p.bytes_received),
        )?;
        family(
            e,
            (
                "peer_sent_frames",
                "Frames written to another process",
                None,
            ),
            "peer",
            counters(|p| p.frames_sent),
        )?;
        family(
            e,
            (
                "peer_received_frames",
                "Frames read from another process",
                None,
            ),
            "peer",
            counters(|p| p.frames_received),
        )?;
        let queued = peers
            .iter()
            .map(|p| (p.rank.to_string(), ConstGauge::new(clamp(p.queued_bytes))));
        family(
            e,
            (
                "peer_queued",
                "Bytes queued for another process and not yet written",
                bytes,
            ),
            "peer",
            queued,
        )
    }
}

/// `n` as a gauge's value.
fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
