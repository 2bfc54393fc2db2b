//! The client side of one process: the state its worker threads share (process cache,
//! outstanding fetches, table list, health) and the communication thread that turns
//! server replies into cache entries.
//!
//! It knows the protocol and the SSP rules; it does not know how messages travel, nor what
//! a server does with them.

mod arena;
mod cache;
mod fetch;
mod live;
mod mailbox;
mod replies;

pub(crate) use crate::sync::Signal;
pub(crate) use arena::{ArenaWords, ProcessArena};
pub(crate) use cache::{CacheRef, ProcessCache};
pub(crate) use fetch::Fetcher;
pub(crate) use live::{LiveWorker, LiveWorkers};
pub(crate) use mailbox::{deadline, Empty, Letter, Mailboxes};
use replies::Replies;

use crate::buf::AlignedBuf;
use crate::config::Config;
use crate::consistency::Staleness;
use crate::error::{panic_message, Error, Result};
use crate::ids::{Clock, ProcessId, RowKey, ShardId, TableId};
use crate::msg::{BranchOutcome, Called, Endpoint, Envelope, ShardPart, ToClient, ToShard};
use crate::placement::Placement;
use crate::server::{LocalArena, RefreshRows};
use crate::sync::lock;
use crate::table::TableMeta;
use crate::transport::{ClientInbox, DirectClient, Inbound, Transport, TransportError};
use crate::world::World;
use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a waiting worker sleeps before re-checking the cluster's health.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(50);

/// How long a send that found its peer gone waits for the communication thread to
/// report the loss (or what the peer said before it): a queue drained in microseconds
/// unless the process is starved.
const LOSS_REPORT: Duration = Duration::from_secs(10);

thread_local! {
    /// Whether this thread is a process's communication thread ([`spawn_comm`]).
    static ON_COMM_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// State shared by a process's worker threads and its communication thread.
pub(crate) struct ClientShared {
    /// This process's rank.
    pub(crate) process: ProcessId,
    /// The cluster's shape.
    pub(crate) world: World,
    pub(crate) config: Config,
    pub(crate) transport: Arc<dyn Transport>,
    /// Which shard holds each row (replaced only between runs, by locality placement).
    placement: RwLock<Arc<Placement>>,
    pub(crate) tables: RwLock<Vec<TableMeta>>,
    pub(crate) cache: ProcessCache,
    pub(crate) fetcher: Fetcher,
    /// Wakes threads waiting for anything the communication thread receives.
    pub(crate) signal: Signal,
    /// The newest data clock any reply has carried (the servers' minimum clock as far as
    /// this process knows). Asynchronous reads require at least this.
    pub(crate) known_min: AtomicU64,
    /// The specialized process cache, once the store has a plan.
    arena: RwLock<Option<Arc<ProcessArena>>>,
    failure: Mutex<Option<Error>>,
    failed: AtomicBool,
    /// The shards' answers to this process's collective requests, until taken.
    replies: Replies,
    /// The local workers' mailboxes (`Worker::send`, `Worker::recv`).
    pub(crate) mailboxes: Mailboxes,
    /// Times a waiting worker took a shard's queued messages ([`ClientShared::help`]).
    pub(crate) helped: AtomicU64,
    /// The local workers' clocks and waits, for observers (the metrics endpoint).
    pub(crate) live: LiveWorkers,
    /// Bytes of UPDATEs this process's workers sent the generic way or as factors, by
    /// table (`Cluster::update_bytes`).
    pub(crate) update_bytes: Mutex<FxHashMap<TableId, u64>>,
    /// The staleness runs read with ([`ClientShared::staleness`]): the configured one,
    /// until a branch with another is switched to (`Cluster::set_staleness`).
    staleness: AtomicU64,
    /// Per worker, the seconds a work unit takes, learnt by the coordinator across
    /// batches (`Worker::work_units`; unknown: `None`).
    pub(crate) unit_times: Mutex<Vec<Option<f64>>>,
}

impl ClientShared {
    pub(crate) fn new(
        process: ProcessId,
        world: World,
        config: Config,
        transport: Arc<dyn Transport>,
    ) -> Self {
        let yield_waits = config.yield_waits;
        let staleness = AtomicU64::new(encode_staleness(config.staleness));
        ClientShared {
            staleness,
            process,
            world,
            cache: ProcessCache::new(config.cache_capacity),
            config,
            transport,
            placement: RwLock::new(Arc::new(Placement::hashed(world.total_shards()))),
            tables: RwLock::new(Vec::new()),
            fetcher: Fetcher::default(),
            signal: Signal::new(yield_waits),
            known_min: AtomicU64::new(0),
            arena: RwLock::new(None),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            replies: Replies::default(),
            mailboxes: Mailboxes::new(world.workers),
            helped: AtomicU64::new(0),
            live: LiveWorkers::new(world.worker_id(process, 0), world.workers),
            update_bytes: Mutex::new(FxHashMap::default()),
            unit_times: Default::default(),
        }
    }

    /// Adds bytes of UPDATEs sent, by table, to [`ClientShared::update_bytes`].
    pub(crate) fn count_update_bytes(&self, sent: &[(TableId, u64)]) {
        let mut counts = lock(&self.update_bytes);
        for &(table, bytes) in sent {
            *counts.entry(table).or_default() += bytes;
        }
    }

    /// Which shard holds each row.
    #[inline]
    pub(crate) fn placement(&self) -> Arc<Placement> {
        self.placement
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the placement (between runs, with every process doing the same).
    pub(crate) fn set_placement(&self, placement: Placement) {
        *self
            .placement
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(placement);
    }

    /// The specialized process cache, if any.
    pub(crate) fn arena(&self) -> Option<Arc<ProcessArena>> {
        self.arena
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Installs (or removes) the specialized process cache; the generic cache is emptied.
    pub(crate) fn set_arena(&self, arena: Option<Arc<ProcessArena>>) {
        *self.arena.write().unwrap_or_else(PoisonError::into_inner) = arena;
        self.cache.clear();
    }

    /// Records the first failure; every later wait returns it.
    pub(crate) fn fail(&self, error: Error) {
        let mut f = lock(&self.failure);
        if f.is_none() {
            *f = Some(error);
        }
        self.failed.store(true, Ordering::Release);
        drop(f);
        self.signal.notify();
        self.mailboxes.wake_all();
    }

    /// `Err` if the cluster has failed or shut down.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let f = lock(&self.failure);
        Err(match &*f {
            Some(Error::Failed { component, message }) => Error::failed(component, message),
            _ => Error::ShutDown,
        })
    }

    /// Sends `msg` to the endpoint it names. A failed send fails the cluster (the
    /// message is lost, and whoever waits for its answer would wait forever) and is
    /// returned, naming the endpoint.
    pub(crate) fn send(&self, msg: Envelope) -> Result<()> {
        let to = msg.to();
        let sent = self.transport.send(msg);
        self.sent(to, sent)
    }

    /// Sends `msg` to shard `to` ([`send`](Self::send)).
    pub(crate) fn send_shard(&self, to: ShardId, msg: ToShard) -> Result<()> {
        self.send(Envelope::Shard(to, msg))
    }

    /// [`send_shard`](Self::send_shard), leaving a shard of this process for another
    /// thread to drive ([`LocalDrive::enqueue`](crate::transport::LocalDrive::enqueue));
    /// [`drive`](Self::drive) it afterwards.
    pub(crate) fn enqueue(&self, to: ShardId, msg: ToShard) -> Result<()> {
        let sent = match self.transport.local_drive() {
            Some(drive) => drive.enqueue(to, msg),
            None => self.transport.send(Envelope::Shard(to, msg)),
        };
        self.sent(Endpoint::Shard(to), sent)
    }

    /// Drives shard `to` after [`enqueue`](Self::enqueue)s
    /// ([`LocalDrive::drive`](crate::transport::LocalDrive::drive)).
    pub(crate) fn drive(&self, to: ShardId) {
        if let Some(drive) = self.transport.local_drive() {
            drive.drive(to);
        }
    }

    /// Takes, on this thread, the messages waiting for a shard of this process that no
    /// other thread is driving ([`LocalDrive::help`](crate::transport::LocalDrive::help)): a worker waiting for an answer does
    /// this before it sleeps. `true` if it handled any.
    pub(crate) fn help(&self) -> bool {
        let helped = self
            .transport
            .local_drive()
            .is_some_and(|drive| drive.help());
        if helped {
            self.helped.fetch_add(1, Ordering::Relaxed);
        }
        helped
    }

    /// While `others_running` (another worker of this process is still in the run),
    /// takes the shard work queued here ([`help`](Self::help)), waiting for it as a
    /// reader waits for an answer. A worker done with its part of a run stays for the
    /// last one's CLOCK: no reader waits on the run's final clock, so without this the
    /// last worker would complete it on every shard of the process alone. Whether that
    /// can take anything (several shards here, driven by their senders) the caller
    /// decides once (`Cluster::help_at_run_end`).
    pub(crate) fn help_while(&self, others_running: impl Fn() -> bool) {
        while others_running() {
            let generation = self.signal.generation();
            if self.help() {
                continue;
            }
            if !others_running() {
                return;
            }
            self.signal.wait(generation, WAIT_SLICE);
        }
    }

    /// The result of sending to `to`: a failure fails the client, naming what was lost.
    ///
    /// A lost peer is reported in the order its messages arrived: the transport queued
    /// the loss behind what the peer sent before it left, so outside the communication
    /// thread this waits (bounded) for that thread to report the first of them. A peer
    /// that failed the cluster and shut down is then reported by its reason (say, a
    /// shard's refusal) rather than by its leaving, whichever thread noticed first.
    fn sent(&self, to: Endpoint, sent: std::result::Result<(), TransportError>) -> Result<()> {
        // A closed shard of this process stopped because the cluster is failing (its
        // refusal, say, is on its way to the communication thread): wait for that reason
        // the same way, so the error names it rather than the closed endpoint.
        let closed_shard = matches!(&sent, Err(TransportError::Closed(Endpoint::Shard(_))));
        let lost = closed_shard || matches!(&sent, Err(TransportError::Network(..)));
        if lost && !ON_COMM_THREAD.with(Cell::get) {
            let reported = self.wait_for("report of a lost peer", LOSS_REPORT, || None::<()>);
            if let Err(e) = reported {
                if self.has_failed() {
                    return Err(e);
                }
            }
        }
        sent.map_err(|e| {
            let what = match (&e, to) {
                // A lost process: the same error whichever noticed first, the network
                // layer or this send.
                (TransportError::Network(..), _) => "cluster".to_string(),
                (_, Endpoint::Shard(s)) => format!("server shard {s}"),
                (_, Endpoint::Client(p)) => format!("process {p}"),
            };
            self.fail(Error::failed(&what, &e));
            Error::failed(what, e)
        })
    }

    /// Local worker `worker` (global id) stopped round `round` with an error: this
    /// process's and every other process's receivers stop waiting for it (best effort: a
    /// process that cannot be told has failed the cluster anyway).
    pub(crate) fn worker_stopped(&self, worker: crate::ids::WorkerId, round: u64) {
        self.mailboxes.stop(worker, round);
        for p in 0..self.world.processes as ProcessId {
            if p != self.process {
                let _ = self.transport.send(Envelope::Client(
                    p,
                    ToClient::WorkerStopped { worker, round },
                ));
            }
        }
    }

    /// Whether the cluster has failed or shut down.
    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Waits until `poll` returns a value, the cluster fails (its error), or `timeout`
    /// passes (an error naming `what`). `poll` is re-run whenever the communication
    /// thread receives something. `Duration::MAX`: no deadline (the wait still ends when
    /// the cluster fails).
    pub(crate) fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let generation = self.signal.generation();
            if let Some(value) = poll() {
                return Ok(value);
            }
            self.check()?;
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Err(Error::failed(
                    what,
                    format!("no answer within {} s", timeout.as_secs_f64()),
                ));
            }
            self.signal.wait(generation, WAIT_SLICE);
        }
    }

    /// Collects `shards` answers to `Dump` requests already sent.
    pub(crate) fn collect_dumps(&self, shards: usize) -> Result<Vec<(RowKey, AlignedBuf)>> {
        self.wait_for("table snapshot", Duration::from_secs(60), || {
            self.replies.take_dumps(shards)
        })
    }

    /// Waits for every shard's answer to the barrier at the end of `run` and returns the
    /// next run's start clock, which they must agree on.
    pub(crate) fn await_run_ready(&self, run: u64) -> Result<Clock> {
        let shards = self.world.total_shards();
        // A run barrier waits for the slowest process's run to end: no fixed bound, but
        // a failed or lost process ends it through `check`.
        let answers = self.wait_for("run barrier", Duration::MAX, || {
            self.replies.take_run_ready(run, shards)
        })?;
        let start = answers[0].1;
        if let Some((shard, other)) = answers.iter().find(|(_, s)| *s != start) {
            return Err(Error::failed(
                "run barrier",
                format!(
                    "shards disagree on the start clock of run {}: {start} and {other} (shard {shard})",
                    run + 1
                ),
            ));
        }
        Ok(start)
    }

    /// Waits for the coordinator's declaration of table `name`.
    pub(crate) fn await_table(&self, name: &str) -> Result<TableMeta> {
        self.wait_for("table declaration", Duration::from_secs(60), || {
            self.replies.take_table(name)
        })
    }

    /// Waits for every process's part of all-gather round `round`. Like a run barrier,
    /// it waits for the slowest process; a failed one ends the wait.
    pub(crate) fn await_gathered(&self, round: u64) -> Result<Vec<AlignedBuf>> {
        self.wait_for("all-gather", Duration::MAX, || {
            self.replies.take_gathered(round)
        })
    }

    /// Waits until every shard of the cluster has finished the migration this process
    /// started ([`ToClient::Migrated`]). Like a run barrier it waits for the slowest; a failed
    /// cluster ends the wait.
    pub(crate) fn await_migrated(&self) -> Result<()> {
        let total = self.world.total_shards();
        self.wait_for("row migration", Duration::MAX, || {
            self.replies.take_migrated(total)
        })
    }

    /// Waits for the answers of this process's `shards` shards to the checkpoint this
    /// process asked them for ([`ToClient::Checkpointed`]), in shard order. Its own shards
    /// write while it waits, so there is no fixed bound; a failed cluster (a shard that
    /// panicked or rejected the request) ends the wait.
    pub(crate) fn await_checkpointed(&self, shards: usize) -> Result<Vec<(ShardId, ShardPart)>> {
        let mut answers = self.wait_for("checkpoint", Duration::MAX, || {
            self.replies.take_checkpointed(shards)
        })?;
        answers.sort_by_key(|(shard, _)| *shard);
        Ok(answers)
    }

    /// Waits for this process's `shards` shards' answers to the server function's call
    /// under way ([`ToClient::Called`]). Its own shards run the function while it waits, so
    /// there is no fixed bound; a failed cluster ends the wait.
    pub(crate) fn await_called(&self, shards: usize) -> Result<Vec<Called>> {
        self.wait_for("server function", Duration::MAX, || {
            self.replies.take_called(shards)
        })
    }

    /// The staleness the next run reads with (the same on every process).
    pub(crate) fn staleness(&self) -> Staleness {
        match self.staleness.load(Ordering::Relaxed) {
            u64::MAX => Staleness::Unbounded,
            s => Staleness::Bounded(s as u32),
        }
    }

    /// Runs from now on read with `staleness`. Between runs only (workers read it when a
    /// run starts and at each CLOCK).
    pub(crate) fn set_staleness(&self, staleness: Staleness) {
        self.staleness
            .store(encode_staleness(staleness), Ordering::Relaxed);
    }

    /// Waits for this process's `shards` shards' answers to the branch op under way
    /// ([`ToClient::Branched`]), in shard order. Its own shards copy rows while it waits,
    /// so there is no fixed bound; a failed cluster ends the wait.
    pub(crate) fn await_branched(&self, shards: usize) -> Result<Vec<(ShardId, BranchOutcome)>> {
        let mut answers = self.wait_for("branch op", Duration::MAX, || {
            self.replies.take_branched(shards)
        })?;
        answers.sort_by_key(|(shard, _)| *shard);
        Ok(answers)
    }

    /// Waits until each of `shards` keeps this process's application state at `clock`
    /// ([`ToClient::StateKept`]), within `timeout`; a failed cluster ends the wait.
    pub(crate) fn await_states_kept(
        &self,
        shards: &[ShardId],
        clock: Clock,
        timeout: Duration,
    ) -> Result<()> {
        self.wait_for("keep_state", timeout, || {
            self.replies.take_states_kept(shards, clock)
        })
    }

    /// Waits until every shard of the cluster has every process's rows of the resume
    /// under way ([`ToClient::Restored`]). Like a run barrier it waits for the slowest process;
    /// a failed cluster (a process that left, a rejected row) ends the wait.
    pub(crate) fn await_restored(&self) -> Result<()> {
        let total = self.world.total_shards();
        self.wait_for("resume", Duration::MAX, || {
            self.replies.take_restored(total)
        })
    }

    /// Waits until every shard of the cluster has every process's rows of the set under
    /// way ([`ToClient::RowsSet`]). Like a run barrier it waits for the slowest process; a
    /// failed cluster (a process that left or called another collective) ends the wait.
    pub(crate) fn await_rows_set(&self) -> Result<()> {
        let total = self.world.total_shards();
        self.wait_for("set_rows", Duration::MAX, || {
            self.replies.take_rows_set(total)
        })
    }

    /// Drops every copy of a row this process holds — the generic cache and the
    /// specialized arena's chunks — so that every later read fetches anew. Between runs
    /// only, once every shard has answered a set ([`ToClient::RowsSet`]): nothing is then on its
    /// way to them, and the shards' next arena refreshes are whole.
    pub(crate) fn forget_rows(&self) {
        self.cache.clear();
        if let Some(arena) = self.arena() {
            arena.forget_chunks();
        }
    }

    fn on_rows(&self, data_clock: Clock, rows: Vec<(RowKey, AlignedBuf)>) {
        self.known_min.fetch_max(data_clock, Ordering::AcqRel);
        let keys: Vec<RowKey> = rows.iter().map(|(k, _)| *k).collect();
        for (key, data) in rows {
            self.cache.install(key, data, data_clock);
        }
        self.fetcher.answered(keys.into_iter(), data_clock);
        self.signal.notify();
    }

    /// An arena refresh at `data_clock` for the plan `epoch`, arrived: `write` puts it in
    /// the arena if that plan is the current one (bytes laid out for another plan are
    /// stale replies to requests made before a re-plan: dropped). A refresh that cannot
    /// be written fails the cluster.
    fn on_refresh(
        &self,
        epoch: u32,
        data_clock: Clock,
        write: impl FnOnce(&ProcessArena) -> Result<()>,
    ) {
        self.known_min.fetch_max(data_clock, Ordering::AcqRel);
        let written = match self.arena() {
            Some(arena) if arena.id == epoch => write(&arena),
            _ => Ok(()),
        };
        if let Err(e) = written {
            self.fail(e);
        }
        self.signal.notify();
    }

    /// Files one of the shards' answers to this process's collective requests
    /// ([`Replies`]) and wakes whoever waits for it.
    fn file(&self, file: impl FnOnce(&Replies)) {
        file(&self.replies);
        self.signal.notify();
    }

    /// Handles one message: a shard's answer, refresh or news, or a worker's message.
    fn on_msg(&self, msg: ToClient) {
        match msg {
            ToClient::Rows {
                data_clock, rows, ..
            } => self.on_rows(data_clock, rows),
            ToClient::SlabRows {
                shard,
                epoch,
                chunk,
                data_clock,
                rows,
                bytes,
            } => self.on_refresh(epoch, data_clock, |arena| {
                arena.write_chunk(shard, chunk, data_clock, rows.as_deref(), bytes.as_bytes())
            }),
            ToClient::MinClock { clock, .. } => {
                self.known_min.fetch_max(clock, Ordering::AcqRel);
            }
            ToClient::Pass {
                from,
                to,
                tag,
                round,
                elem,
                values,
            } => {
                // The transport checked that `to` is ours (and the in-process one only
                // carries what our own code sent).
                let local = self.world.local_worker(self.process, to);
                let delivered = local.is_some_and(|w| {
                    self.mailboxes.deliver(
                        w,
                        from,
                        tag,
                        Letter {
                            round,
                            elem,
                            values,
                        },
                    )
                });
                if !delivered {
                    self.fail(Error::failed(
                        "client communication",
                        format!(
                            "a message for worker {to}, which is not on process {}",
                            self.process
                        ),
                    ));
                }
            }
            ToClient::WorkerStopped { worker, round } => self.mailboxes.stop(worker, round),
            ToClient::Rejected { shard, reason } => {
                self.fail(Error::failed(format!("server shard {shard}"), reason));
            }
            ToClient::RunReady { shard, run, start } => {
                self.file(|r| r.run_ready(shard, run, start))
            }
            ToClient::TableDeclared { meta } => self.file(|r| r.declared(meta)),
            ToClient::Gathered { round, parts } => self.file(|r| r.gathered(round, parts)),
            ToClient::Migrated { shard } => self.file(|r| r.migrated(shard)),
            ToClient::Checkpointed { shard, part } => self.file(|r| r.checkpointed(shard, part)),
            ToClient::Restored { shard } => self.file(|r| r.restored(shard)),
            ToClient::RowsSet { shard } => self.file(|r| r.rows_set(shard)),
            ToClient::DumpRows { rows, .. } => self.file(|r| r.dump(rows)),
            ToClient::Called { called } => self.file(|r| r.called(called)),
            ToClient::Branched { shard, outcome } => self.file(|r| r.branched(shard, outcome)),
            ToClient::StateKept { shard, clock } => self.file(|r| r.state_kept(shard, clock)),
        }
    }
}

impl DirectClient for ClientShared {
    fn deliver(&self, msg: ToClient) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| self.on_msg(msg))) {
            let why = panic_message(payload.as_ref());
            self.fail(Error::failed("client message handler", why));
        }
    }
}

/// `staleness` as [`ClientShared`] keeps it: the bound, or `u64::MAX` for unbounded.
fn encode_staleness(staleness: Staleness) -> u64 {
    match staleness {
        Staleness::Bounded(s) => u64::from(s),
        Staleness::Unbounded => u64::MAX,
    }
}

/// Runs the communication thread of `shared`'s process, bound to the CPUs `pus` when
/// given, until it is stopped locally or its inbox closes. A panic fails the process's
/// cluster (waiting workers see the error) instead of leaving them waiting.
pub(crate) fn spawn_comm(
    shared: Arc<ClientShared>,
    inbox: ClientInbox,
    pus: Option<Vec<u32>>,
) -> std::io::Result<JoinHandle<Option<()>>> {
    let name = format!("iterstore-client-{}", shared.process);
    crate::topology::bind::spawn_bound(name, pus, move || {
        ON_COMM_THREAD.with(|c| c.set(true));
        loop {
            match inbox.recv() {
                Ok(Inbound::Msg(msg)) => {
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| shared.on_msg(msg))) {
                        let why = panic_message(payload.as_ref());
                        shared.fail(Error::failed("client communication thread", why));
                        break;
                    }
                }
                Ok(Inbound::Lost(reason)) => {
                    shared.fail(Error::failed("cluster", reason));
                    break;
                }
                Ok(Inbound::Stop) => break,
                Err(_) => {
                    shared.fail(Error::failed("client communication", "inbox closed"));
                    break;
                }
            }
        }
        shared.fail(Error::ShutDown);
    })
}

impl LocalArena for ClientShared {
    fn write_refresh(
        &self,
        shard: ShardId,
        epoch: u32,
        chunk: u32,
        data_clock: Clock,
        rows: &RefreshRows<'_>,
    ) {
        self.on_refresh(epoch, data_clock, |arena| {
            arena.write_chunk_from(
                (shard, chunk, data_clock),
                rows.positions(),
                (rows.words(), || rows.ranges()),
                |k| rows.changed_row(k),
            )
        });
    }
}
