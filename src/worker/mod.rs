//! [`Worker`]: the handle a worker thread uses for READ, UPDATE and CLOCK.
//!
//! A worker buffers its updates of the current clock in an operation log and sends them
//! at `CLOCK`. It reads from the process cache, fetching on a miss or when the cached
//! snapshot is too stale, and adds its own updates the snapshot does not include
//! (read-my-writes). It never talks to a server except through the transport.

mod clock;
mod generic;
mod held;
mod many;
mod messages;
mod outer;
mod sent;
mod special;
pub(crate) mod units;

/// Why a receive ended when its sender stopped with an error ([`Error::Receive`]'s reason):
/// a consequence, so a run reports the sender's error instead.
///
/// [`Error::Receive`]: crate::error::Error::Receive
pub(crate) const SENDER_STOPPED: &str = "the sender stopped with an error";

use crate::buf::AlignedBuf;
use crate::client::{ClientShared, ProcessArena};
use crate::consistency::Staleness;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::gather::{Access, AccessLog};
use crate::ids::{Clock, RowKey, WorkerId};
use crate::table::{resolve, Table, TableMeta};
use rustc_hash::FxHashMap;
use sent::SentUpdates;
use special::Place;
pub(crate) use special::{AccessCounters, SpecialWorker, WorkerMemory};
use std::sync::atomic::Ordering;
use std::sync::Arc;

type Oplog = FxHashMap<RowKey, AlignedBuf>;

/// One worker thread's view of the store. Obtained inside [`Cluster::run`].
///
/// [`Cluster::run`]: crate::Cluster::run
pub struct Worker<'a> {
    shared: &'a ClientShared,
    tables: &'a [TableMeta],
    cluster: u64,
    /// Global id in the cluster (what messages and applications see).
    global: WorkerId,
    /// Index among this process's workers.
    local: usize,
    /// Workers in the cluster.
    workers: usize,
    clock: Clock,
    /// The clock this run started at (see [`Staleness::required_in_run`]).
    run_start: Clock,
    /// The data clock a read requires at `clock` in this run
    /// ([`Staleness::required_in_run`]), kept as `clock` moves; under unbounded
    /// staleness a read also requires the known minimum clock.
    floor: Clock,
    /// Whether staleness is unbounded (then a read also requires the known minimum
    /// clock): the configuration's, which never changes, kept here so that a read's fast
    /// path does not reach through `shared` for it (that cost MF 1.5 % an iteration).
    unbounded: bool,
    oplog: Oplog,
    /// This worker's sent updates of recent clocks, for read-my-writes under SSP `s > 0`.
    recent: SentUpdates<Oplog>,
    /// A row's worth of words for `read_with` when it cannot lend the row (grown, never
    /// shrunk; see [`scratch_of`]).
    scratch: Vec<u64>,
    /// Float rows held in this clock outside the specialized store's views, as this
    /// worker sees them (see [`Worker::read_update`] and `held.rs`).
    held: Oplog,
    /// Words for the rows of a `read_update` off its fast path (grown, never shrunk).
    held_scratch: Vec<u64>,
    /// Where accesses are logged while the pattern is being gathered.
    log: Option<AccessLog>,
    /// In a virtual iteration: reads return zeros, updates are dropped, nothing is sent.
    virtual_only: bool,
    /// Specialized structures, once the store has a plan.
    special: Option<SpecialWorker>,
    /// The round (run or virtual iteration, counted alike by every process) this worker
    /// runs in; keys which senders have stopped for [`Worker::recv_from`].
    round: u64,
    /// Rank-k updates of this clock, sent as factors at CLOCK ([`Worker::update_outer`]).
    outer: Vec<outer::PendingOuter>,
}

/// What a worker thread keeps between runs: its specialized state, built once per plan.
#[derive(Default)]
pub(crate) enum KeptState {
    /// Nothing yet.
    #[default]
    Nothing,
    /// The worker's op tape for the plan of this arena, to build the state from.
    Tape(Arc<ProcessArena>, Vec<u32>),
    /// The state itself.
    Built(Box<SpecialWorker>),
}

/// What a worker does with its operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Operate on the store.
    Normal,
    /// Operate on the store and log every access (first-iteration gathering).
    Recording,
    /// Only log (virtual iteration).
    Virtual,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        shared: &'a ClientShared,
        tables: &'a [TableMeta],
        cluster: u64,
        id: usize,
        clock: Clock,
        role: Role,
        kept: KeptState,
    ) -> Self {
        if role != Role::Virtual {
            shared.live.set_clock(id, clock);
        }
        Worker {
            shared,
            tables,
            cluster,
            global: shared.world.worker_id(shared.process, id),
            local: id,
            workers: shared.world.total_workers(),
            clock,
            run_start: clock,
            floor: shared.staleness().required_in_run(clock, clock),
            unbounded: shared.staleness() == Staleness::Unbounded,
            oplog: Oplog::default(),
            recent: SentUpdates::default(),
            scratch: Vec::new(),
            held: Oplog::default(),
            held_scratch: Vec::new(),
            outer: Vec::new(),
            round: 0,
            log: (role != Role::Normal).then(AccessLog::default),
            virtual_only: role == Role::Virtual,
            special: match role {
                Role::Virtual => None,
                _ => shared.arena().map(|arena| {
                    let build = |tape| {
                        SpecialWorker::new(arena.clone(), tables, id, &shared.config, tape)
                            .with_ssp(shared.staleness() != Staleness::BSP)
                    };
                    match kept {
                        // The same plan as last run: reuse the structures built for it.
                        KeptState::Built(mut sp) if Arc::ptr_eq(&sp.arena, &arena) => {
                            sp.start_run();
                            *sp
                        }
                        KeptState::Tape(of, tape) if Arc::ptr_eq(&of, &arena) => build(tape),
                        // No tape for this plan: every access takes the indexed path.
                        _ => build(Vec::new()),
                    }
                }),
            },
        }
    }

    /// This worker, running in round `round` (see [`Worker::recv_from`]).
    pub(crate) fn in_round(mut self, round: u64) -> Self {
        self.round = round;
        self
    }

    /// What to hand to this worker's next run ([`Worker::new`]'s `kept`), so that its
    /// specialized state is built once per plan rather than once per run: the state itself
    /// if the run finished cleanly (`clean`), else only its op tape (the state may hold
    /// updates that were never sent). Also returns how its accesses found their rows.
    pub(crate) fn take_kept(&mut self, clean: bool) -> (KeptState, AccessCounters) {
        match self.special.take() {
            None => (KeptState::Nothing, AccessCounters::default()),
            Some(mut sp) => {
                let counters = sp.take_counters();
                if clean {
                    (KeptState::Built(Box::new(sp)), counters)
                } else {
                    let (arena, tape) = sp.into_tape();
                    (KeptState::Tape(arena, tape), counters)
                }
            }
        }
    }

    /// Whether this worker is running a virtual iteration (reads return zeros and updates
    /// are dropped). Code that changes state outside the store (a worker's local
    /// variables kept across runs, files, counters) must not do so while this is `true`;
    /// see [`Cluster::virtual_iteration`](crate::Cluster::virtual_iteration).
    pub fn is_virtual(&self) -> bool {
        self.virtual_only
    }

    /// The accesses logged so far, leaving none.
    pub(crate) fn take_log(&mut self) -> Option<AccessLog> {
        self.log.take()
    }

    /// Logs an access; `true` if the operation must not touch the store (virtual).
    #[inline]
    fn record(&mut self, key: RowKey, access: Access) -> bool {
        if let Some(log) = &mut self.log {
            log.record(key, access);
        }
        self.virtual_only
    }

    /// This worker's index in the cluster, `0..workers()`: worker `w` of process `p`
    /// is `p * Config::workers + w`. Partition work by it.
    pub fn id(&self) -> usize {
        self.global as usize
    }

    /// Number of workers in the cluster (over all its processes).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Number of `CLOCK` calls this worker has completed (over all runs).
    pub fn current_clock(&self) -> Clock {
        self.clock
    }

    /// Copies row `row` of `table` into `out` (which must have the table's width): a value
    /// at most `s` clocks stale, plus every update this worker has made — except for a
    /// table with a server-side update rule ([`Rule`](crate::Rule)), whose updates are
    /// gradients: there it is the servers' value alone.
    #[inline(always)]
    pub fn read<T: Element>(&mut self, table: &Table<T>, row: u64, out: &mut [T]) -> Result<()> {
        // The specialized fast path needs only the handle's cluster and width checked:
        // the row's block names its table.
        // No row bound here: the fast path serves only planned rows, which were checked
        // when the pattern was recorded (an out-of-range row never reaches a plan).
        let checked = table.cluster == self.cluster && out.len() == table.width;
        if checked && self.log.is_none() && self.special.is_some() && !self.current(table.id) {
            let required = self.required();
            // Asked only for a row without a block: whether the generic op log holds no
            // updates (of this clock or recent ones) such a read would have to add, and
            // no row is held outside the views.
            let (oplog, recent, held) = (&self.oplog, &self.recent, &self.held);
            let generic = || oplog.is_empty() && recent.is_empty() && held.is_empty();
            if let Some(sp) = &mut self.special {
                if sp.read_fast(table.key(row), required, generic, out) {
                    return Ok(());
                }
            }
        }
        self.read_checked(table, row, out)
    }

    /// [`read`](Self::read) with every check, off the fast path.
    #[inline(never)]
    fn read_checked<T: Element>(
        &mut self,
        table: &Table<T>,
        row: u64,
        out: &mut [T],
    ) -> Result<()> {
        self.check(table, row, out.len())?;
        let key = table.key(row);
        if self.log.is_none() && self.special.is_none() {
            return self.read_generic(key, out);
        }
        self.read_slow(key, out)
    }

    /// [`read`](Self::read) off the specialized fast path.
    #[inline(never)]
    fn read_slow<T: Element>(&mut self, key: RowKey, out: &mut [T]) -> Result<()> {
        if self.record(key, Access::Read) {
            out.fill(T::default());
            return Ok(());
        }
        let place = self.special_place(key);
        if self.read_held(key, out) {
            return Ok(());
        }
        match place {
            // The tape's cursor moved past it all the same.
            Some(_) if self.current(key.table) => self.read_generic(key, out),
            Some(place) => {
                let data_clock = self.read_special(place, out)?;
                self.add_own(key, data_clock, out);
                Ok(())
            }
            None => self.read_generic(key, out),
        }
    }

    /// Calls `f` with row `row` of `table` (same value as [`read`](Self::read)) without
    /// copying it when this worker has no unsent updates to the row. `f` runs while the
    /// row is locked for reading: keep it short.
    #[inline(always)]
    pub fn read_with<T: Element, R>(
        &mut self,
        table: &Table<T>,
        row: u64,
        f: impl FnOnce(&[T]) -> R,
    ) -> Result<R> {
        // As in `read`: the fast path needs only the handle's cluster checked (the row's
        // block names its table), and builds a scratch row only when it needs one.
        let mut f = f;
        if table.cluster == self.cluster
            && self.log.is_none()
            && self.special.is_some()
            && !self.current(table.id)
        {
            let required = self.required();
            let (oplog, recent, held) = (&self.oplog, &self.recent, &self.held);
            let generic = || oplog.is_empty() && recent.is_empty() && held.is_empty();
            if let Some(sp) = &mut self.special {
                let scratch = (&mut self.scratch, table.width);
                match sp.read_with_fast(table.key(row), required, generic, scratch, f) {
                    Ok(r) => return Ok(r),
                    Err(back) => f = back,
                }
            }
        }
        self.read_with_checked(table, row, f)
    }

    /// [`read_with`](Self::read_with) with every check, off the fast path (out of line,
    /// so that callers' loops hold only the fast path).
    #[inline(never)]
    fn read_with_checked<T: Element, R>(
        &mut self,
        table: &Table<T>,
        row: u64,
        f: impl FnOnce(&[T]) -> R,
    ) -> Result<R> {
        let meta = self.check(table, row, table.width)?;
        let key = table.key(row);
        if self.log.is_none() && self.special.is_none() {
            return self.read_with_generic(key, meta, f);
        }
        self.read_with_slow(key, meta, f)
    }

    /// [`read_with`](Self::read_with) off the specialized fast path.
    #[inline(never)]
    fn read_with_slow<T: Element, R>(
        &mut self,
        key: RowKey,
        meta: &TableMeta,
        f: impl FnOnce(&[T]) -> R,
    ) -> Result<R> {
        if self.record(key, Access::Read) {
            let zeros = vec![T::default(); meta.width];
            return Ok(f(&zeros));
        }
        let place = self.special_place(key);
        if let Some(row) = self.held_row(key) {
            return Ok(f(row.cast()));
        }
        let Some(place) = place.filter(|_| !self.current(key.table)) else {
            return self.read_with_generic(key, meta, f);
        };
        let required = self.required();
        if let Some(sp) = &mut self.special {
            if let Some((view, _)) = sp.view::<T>(self.shared, place, required)? {
                return Ok(f(view));
            }
        }
        self.lend_own_row(key, meta, |w, row| w.read_special(place, row), f)
    }

    /// Calls `f` with `key`'s row as this worker sees it, built in the scratch row: `fill`
    /// copies a snapshot in and returns its data clock, then this worker's own updates the
    /// snapshot lacks are added.
    fn lend_own_row<T: Element, R>(
        &mut self,
        key: RowKey,
        meta: &TableMeta,
        fill: impl FnOnce(&mut Self, &mut [T]) -> Result<Clock>,
        f: impl FnOnce(&[T]) -> R,
    ) -> Result<R> {
        let mut words = std::mem::take(&mut self.scratch);
        let row = scratch_of(&mut words, meta.width);
        let result = fill(self, row).map(|data_clock| {
            self.add_own(key, data_clock, row);
            f(row)
        });
        self.scratch = words;
        result
    }

    /// Adds `delta` (the table's width) to row `row` of `table`. Visible to this worker at
    /// once, to the others after this worker's next [`clock`](Self::clock) as SSP allows.
    #[inline(always)]
    pub fn update<T: Element>(&mut self, table: &Table<T>, row: u64, delta: &[T]) -> Result<()> {
        // As in `read`: the fast path needs only the cluster and width checked.
        if table.cluster == self.cluster
            && delta.len() == table.width
            && self.log.is_none()
            && self.held.is_empty()
        {
            if let Some(sp) = &mut self.special {
                if sp.update_fast(table.key(row), delta.len(), 0, delta) {
                    return Ok(());
                }
            }
        }
        self.update_checked(table, row, delta)
    }

    /// [`update`](Self::update) with every check, off the fast path.
    #[inline(never)]
    fn update_checked<T: Element>(
        &mut self,
        table: &Table<T>,
        row: u64,
        delta: &[T],
    ) -> Result<()> {
        self.check(table, row, delta.len())?;
        let key = table.key(row);
        if self.log.is_none() && self.special.is_none() {
            self.update_generic(key, delta);
            return Ok(());
        }
        self.update_slow(key, delta)
    }

    /// [`update`](Self::update) off the specialized fast path.
    #[inline(never)]
    fn update_slow<T: Element>(&mut self, key: RowKey, delta: &[T]) -> Result<()> {
        if self.record(key, Access::Update) {
            return Ok(());
        }
        if let Some(place) = self.special_place(key) {
            if let Some(sp) = &mut self.special {
                if sp.update(place, 0, delta) {
                    self.add_to_held(key, 0, delta);
                    return Ok(());
                }
            }
        }
        self.update_generic(key, delta);
        Ok(())
    }

    /// Adds `delta` to column `column` of row `row` of `table` (a sparse update): the same
    /// as [`update_cols`](Self::update_cols) with one column.
    #[inline(always)]
    pub fn update_col<T: Element>(
        &mut self,
        table: &Table<T>,
        row: u64,
        column: usize,
        delta: T,
    ) -> Result<()> {
        self.update_cols(table, row, &[(column, delta)])
    }

    /// Adds each `(column, delta)` of `cols` to row `row` of `table`, in order: one sparse
    /// UPDATE of the row, a single access of the pattern whatever `cols` holds. An empty
    /// `cols` changes nothing but still is the row's UPDATE, so an application whose
    /// update is sometimes zero (a token that keeps its topic) keeps one access pattern.
    #[inline(always)]
    pub fn update_cols<T: Element>(
        &mut self,
        table: &Table<T>,
        row: u64,
        cols: &[(usize, T)],
    ) -> Result<()> {
        let width = table.width;
        if self.log.is_none()
            && table.cluster == self.cluster
            && self.held.is_empty()
            && cols.iter().all(|&(c, _)| c < width)
        {
            // A planned step matched by table id and row is a table of this cluster.
            if let Some(sp) = &mut self.special {
                if sp.update_cols_fast(table.key(row), width, cols) {
                    return Ok(());
                }
            }
        }
        self.update_cols_slow(table, row, cols)
    }

    /// [`update_cols`](Self::update_cols) off the specialized fast path.
    #[inline(never)]
    fn update_cols_slow<T: Element>(
        &mut self,
        table: &Table<T>,
        row: u64,
        cols: &[(usize, T)],
    ) -> Result<()> {
        let meta = self.check(table, row, table.width)?;
        if let Some(&(column, _)) = cols.iter().find(|&&(c, _)| c >= table.width) {
            return Err(Error::ColumnOutOfRange {
                table: meta.name.clone(),
                row,
                column,
                width: table.width,
            });
        }
        let key = table.key(row);
        if self.record(key, Access::Update) {
            return Ok(());
        }
        // The place is looked up even for no column: it moves the tape's cursor.
        let place = self.special_place(key);
        if cols.is_empty() {
            return Ok(());
        }
        for &(column, delta) in cols {
            self.add_to_held(key, column, std::slice::from_ref(&delta));
        }
        if let Some(place) = place {
            if let Some(sp) = &mut self.special {
                // One place: the first column taken means every column is.
                let taken = |&(column, delta): &(usize, T)| {
                    sp.update(place, column, std::slice::from_ref(&delta))
                };
                if cols.iter().all(taken) {
                    return Ok(());
                }
            }
        }
        let bytes = meta.row_bytes();
        let row_buf = self
            .oplog
            .entry(key)
            .or_insert_with(|| AlignedBuf::zeroed(bytes));
        let cells = row_buf.cast_mut::<T>();
        for &(column, delta) in cols {
            cells[column] = cells[column].add(delta);
        }
        Ok(())
    }

    /// The smallest data clock this worker may read now.
    #[inline]
    fn required(&self) -> Clock {
        if self.unbounded {
            self.floor
                .max(self.shared.known_min.load(Ordering::Acquire))
        } else {
            self.floor
        }
    }

    #[inline]
    fn check<T: Element>(&self, table: &Table<T>, row: u64, len: usize) -> Result<&'a TableMeta> {
        let meta = resolve(self.tables, self.cluster, table)?;
        if row >= table.rows {
            return Err(Error::RowOutOfRange {
                table: meta.name.clone(),
                row,
                rows: table.rows,
            });
        }
        if len != table.width {
            return Err(Error::WidthMismatch {
                table: meta.name.clone(),
                row,
                expected: table.width,
                actual: len,
            });
        }
        Ok(meta)
    }

    /// Whether a READ of `table` fetches the servers' current value, planned or not: in an
    /// asynchronous cluster, a table with an update rule, which the servers step as
    /// pushes arrive (Downpour SGD), not once a clock is complete.
    #[inline(always)]
    fn current(&self, table: crate::ids::TableId) -> bool {
        self.unbounded && !self.additive(table)
    }

    /// Where `key` lives in the specialized store, if the store is specialized and `key`
    /// is planned.
    #[inline(always)]
    fn special_place(&mut self, key: RowKey) -> Option<Place> {
        self.special.as_mut()?.place(key)
    }

    /// Reads the row at `place` through the specialized path and adds this worker's own
    /// specialized updates; returns the snapshot's data clock.
    #[inline(always)]
    fn read_special<T: Element>(&mut self, place: Place, dst: &mut [T]) -> Result<Clock> {
        let required = self.required();
        let shared = self.shared;
        let Some(sp) = &mut self.special else {
            return Err(Error::failed("worker", "specialized read without a plan"));
        };
        if let Some(data_clock) = sp.read_view(shared, place, required, dst)? {
            // A row with a view takes all of this worker's updates in its delta buffer
            // (none go to the generic log), so the caller's generic merge adds nothing.
            return Ok(data_clock);
        }
        let data_clock = sp.read(shared, place, required, bytemuck::cast_slice_mut(dst))?;
        sp.add_own(place, data_clock, dst);
        Ok(data_clock)
    }
}

/// `words` as one row of `width` elements of `T`, grown to fit first.
#[inline(always)]
pub(crate) fn scratch_of<T: Element>(words: &mut Vec<u64>, width: usize) -> &mut [T] {
    let n = (width * size_of::<T>()).div_ceil(8);
    if words.len() < n {
        words.resize(n, 0);
    }
    &mut bytemuck::cast_slice_mut::<u64, T>(&mut words[..n])[..width]
}
