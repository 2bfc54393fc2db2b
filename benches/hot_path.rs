//! Criterion benchmarks of the store's hot path — READ, UPDATE and CLOCK on warm rows —
//! through the public API only.
//!
//! Every benchmark starts its own cluster: [`SHARDS`] server shards, one `f32` table of
//! [`ROWS`] rows, every row written once and then cached (an untimed warm pass), BSP. Each
//! worker walks the rows in a fixed scattered order (a [`RowCycle`]), the workers at
//! different positions of the same working set. Time is taken *inside* each worker
//! (`iter_custom`), so thread start-up, the end-of-run CLOCK and any settling are not
//! counted; the slowest worker's time is reported, per operation and per worker
//! (`Throughput::Elements(1)`: criterion's "elem/s" is operations per second per worker).
//!
//! Groups (ids are `group/mode/workers`, e.g. `read/virtual/2w`; `-width64` marks 64-wide
//! rows):
//!
//! - `read`: copying [`Worker::read`] of a cached row;
//! - `read_with`: zero-copy [`Worker::read_with`] of a cached row;
//! - `update`: dense [`Worker::update`] of a row already updated in this clock;
//! - `update_col`: sparse [`Worker::update_col`] of such a row;
//! - `read_update`: READ then UPDATE of the same row, as in an SGD step (so the READ adds
//!   this worker's unsent update: read-my-writes). A criterion iteration here is a pass
//!   over all rows, reported per operation, because every measurement starts by
//!   re-fetching the rows the previous one's CLOCK made stale;
//! - `clock`: one [`Worker::clock`] with [`DIRTY_ROWS`] dirty rows, the same rows every
//!   clock (the dirtying and the BSP wait before it are not timed);
//! - `virtual_iteration`: one whole [`Cluster::virtual_iteration`] versus one whole real
//!   iteration ([`Cluster::run`]) of the same reads and updates, in a generic and in a
//!   specialized store (ids `virtual`, `real-generic`, `real-virtual`), wall time of the
//!   call.
//!
//! Updates within a clock hit the same working set, so the operation log holds at most
//! [`ROWS`] rows; the update groups first make untimed passes over every row (the first
//! one also re-fetches what the previous run's CLOCK made stale, then [`SETTLE_PASSES`]
//! more), so every timed update finds its row already in the log: the steady state of a
//! clock. The first touch of a row in a clock is paid in `virtual_iteration/real-*`.
//!
//! For [`Mode::Virtual`] the cluster first runs a virtual iteration of the benchmark's
//! own access sequence (one pass over the rows, then CLOCK), so the store can specialize
//! before any value exists. See `BENCHMARKS.md` for results and how to run them.

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use iterstore::{Cluster, Config, Mode, Result, Table, Worker};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Rows in the working set.
const ROWS: u64 = 10_000;
/// Step between consecutive rows of a [`RowCycle`]: a prime not dividing [`ROWS`], so a
/// cycle visits every row once per pass, in an order no hardware prefetcher follows.
const STRIDE: u64 = 7_919;
/// Server shards the rows are spread over.
const SHARDS: usize = 2;
/// Row width (f32 elements) of every group.
const WIDTH: usize = 16;
/// The wider row width measured for `read` and `update`.
const WIDE: usize = 64;
/// Rows a worker dirties before each measured CLOCK.
const DIRTY_ROWS: u64 = 1_000;
/// Rows read before each CLOCK of the `clock` group, to wait for the servers (BSP) so
/// they never fall behind. With today's placement rows `0..4` lie on both shards; were
/// that to change the wait would only cover one shard, still correct.
const SYNC_ROWS: u64 = 4;
/// Untimed passes after the first one of a pretouch. Right after the first pass, which
/// re-fetches every row, per-pass time on the 2-core test VM falls ~4x over the next 2–5
/// passes (cause not established); timing starts after these so every mode is measured
/// in its steady state.
const SETTLE_PASSES: u64 = 8;
/// Store modes compared.
const MODES: [Mode; 2] = [Mode::Generic, Mode::Virtual];
/// Worker counts compared.
const WORKERS: [usize; 2] = [1, 2];
/// The delta every update adds (per element).
const DELTA: f32 = 1e-3;

/// The operation a benchmark repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    ReadWith,
    Update,
    UpdateCol,
    ReadUpdate,
    Clock,
}

impl Op {
    /// The criterion group name.
    const fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::ReadWith => "read_with",
            Op::Update => "update",
            Op::UpdateCol => "update_col",
            Op::ReadUpdate => "read_update",
            Op::Clock => "clock",
        }
    }

    /// Operations per criterion iteration. `read_update` starts every measurement with
    /// a cold pass (one fetch round trip per row, ~0.3 s), so criterion would otherwise
    /// pick one operation per sample; its iterations are whole passes instead, and the
    /// measured time is divided back to one operation.
    const fn ops_per_iter(self) -> u32 {
        match self {
            Op::ReadUpdate => ROWS as u32,
            _ => 1,
        }
    }

    /// Whether a measurement starts with untimed passes over every row: the operation
    /// updates, so the previous run's CLOCK made the cache stale and emptied the log.
    const fn pretouches(self) -> bool {
        matches!(self, Op::Update | Op::UpdateCol | Op::ReadUpdate)
    }
}

/// One benchmark's setting.
#[derive(Debug, Clone, Copy)]
struct Case {
    op: Op,
    mode: Mode,
    workers: usize,
    width: usize,
}

impl Case {
    /// The benchmark id within the group, e.g. `generic/2w` or `virtual/1w-width64`.
    fn id(&self) -> String {
        let wide = if self.width == WIDTH {
            String::new()
        } else {
            format!("-width{}", self.width)
        };
        format!("{}/{}w{wide}", self.mode.name(), self.workers)
    }
}

/// A worker's walk over the working set: `start, start + STRIDE, …` modulo [`ROWS`],
/// without a division per step. Workers start half the row space apart, so they never
/// touch the same row at the same step.
struct RowCycle {
    next: u64,
}

impl RowCycle {
    fn new(worker: &Worker<'_>) -> Self {
        RowCycle {
            next: worker.id() as u64 * ROWS / worker.workers() as u64,
        }
    }

    #[inline]
    fn next_row(&mut self) -> u64 {
        let row = self.next;
        self.next += STRIDE;
        if self.next >= ROWS {
            self.next -= ROWS;
        }
        row
    }
}

/// Per-worker buffers, allocated outside the timed region.
struct Scratch {
    out: Vec<f32>,
    delta: Vec<f32>,
    column: usize,
}

impl Scratch {
    fn new(width: usize) -> Self {
        Scratch {
            out: vec![0.0; width],
            delta: vec![DELTA; width],
            column: 0,
        }
    }
}

/// Runs `op` on `ops` consecutive rows of this worker's [`RowCycle`] (for [`Op::Clock`]:
/// `ops` CLOCKs) and returns the time taken. With `pretouch`, untimed passes over every
/// row come first: one that fetches what a previous CLOCK made stale and puts every row
/// in the operation log, then [`SETTLE_PASSES`] more.
fn drive(
    w: &mut Worker<'_>,
    table: &Table<f32>,
    op: Op,
    ops: u64,
    pretouch: bool,
) -> Result<Duration> {
    match op {
        Op::Read => timed(w, table, ops, pretouch, |w, t, row, s| {
            w.read(t, row, &mut s.out)?;
            black_box(&mut s.out);
            Ok(())
        }),
        Op::ReadWith => timed(w, table, ops, pretouch, |w, t, row, _| {
            black_box(w.read_with(t, row, |values| black_box(values)[0])?);
            Ok(())
        }),
        Op::Update => timed(w, table, ops, pretouch, |w, t, row, s| {
            w.update(t, row, black_box(&s.delta))
        }),
        Op::UpdateCol => timed(w, table, ops, pretouch, |w, t, row, s| {
            s.column += 1;
            if s.column == s.delta.len() {
                s.column = 0;
            }
            w.update_col(t, row, s.column, black_box(DELTA))
        }),
        Op::ReadUpdate => timed(w, table, ops, pretouch, |w, t, row, s| {
            w.read(t, row, &mut s.out)?;
            black_box(&mut s.out);
            w.update(t, row, black_box(&s.delta))
        }),
        Op::Clock => clocks(w, table, ops),
    }
}

/// The timed loop of [`drive`], monomorphized per operation.
#[inline(always)]
fn timed<F>(
    w: &mut Worker<'_>,
    table: &Table<f32>,
    ops: u64,
    pretouch: bool,
    mut step: F,
) -> Result<Duration>
where
    F: FnMut(&mut Worker<'_>, &Table<f32>, u64, &mut Scratch) -> Result<()>,
{
    let mut scratch = Scratch::new(table.width());
    let mut rows = RowCycle::new(w);
    if pretouch {
        // Full passes return the cycle to where it started.
        for _ in 0..ROWS * (1 + SETTLE_PASSES) {
            step(w, table, rows.next_row(), &mut scratch)?;
        }
    }
    let start = Instant::now();
    for _ in 0..ops {
        step(w, table, rows.next_row(), &mut scratch)?;
    }
    Ok(start.elapsed())
}

/// `iters` iterations of the `clock` group (see [`clock_iteration`]); only the CLOCK
/// calls are timed.
fn clocks(w: &mut Worker<'_>, table: &Table<f32>, iters: u64) -> Result<Duration> {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        total += clock_iteration(w, table)?;
    }
    Ok(total)
}

/// One iteration of the `clock` group: READ [`SYNC_ROWS`] rows (under BSP this waits until
/// the servers have applied every worker's previous CLOCK, so they never fall behind),
/// UPDATE the same [`DIRTY_ROWS`] rows as every iteration, CLOCK. Returns the time of the
/// CLOCK alone.
fn clock_iteration(w: &mut Worker<'_>, table: &Table<f32>) -> Result<Duration> {
    let delta = vec![DELTA; table.width()];
    let mut out = vec![0.0; table.width()];
    for row in 0..SYNC_ROWS {
        w.read(table, row, &mut out)?;
    }
    let mut rows = RowCycle::new(w);
    for _ in 0..DIRTY_ROWS {
        w.update(table, rows.next_row(), &delta)?;
    }
    let start = Instant::now();
    w.clock()?;
    Ok(start.elapsed())
}

/// One iteration of `op` as the application would write it, the access sequence a
/// virtual iteration records: one pass over the working set then CLOCK (for
/// [`Op::Clock`], a [`clock_iteration`]).
fn iteration(w: &mut Worker<'_>, table: &Table<f32>, op: Op) -> Result<()> {
    if op == Op::Clock {
        return clock_iteration(w, table).map(drop);
    }
    drive(w, table, op, ROWS, false)?;
    w.clock()
}

/// A started cluster with its table written once and cached.
struct Fixture {
    cluster: Cluster,
    table: Table<f32>,
}

impl Fixture {
    fn new(case: &Case) -> Fixture {
        let config = Config::new(case.workers)
            .with_shards(SHARDS)
            .with_mode(case.mode);
        let mut cluster = Cluster::start(config).expect("start the cluster");
        let table = cluster
            .create_table::<f32>("bench", case.width)
            .expect("create the table");
        if case.mode == Mode::Virtual {
            cluster
                .virtual_iteration(|w| iteration(w, &table, case.op))
                .expect("virtual iteration");
        }
        let ones = vec![1.0f32; case.width];
        cluster
            .run(|w| {
                if w.id() == 0 {
                    for row in 0..ROWS {
                        w.update(&table, row, &ones)?;
                    }
                }
                w.clock()
            })
            .expect("initialise the rows");
        let mut fixture = Fixture { cluster, table };
        fixture.warm();
        fixture
    }

    /// Reads every row once (untimed), the workers sharing the work, so that every row is
    /// cached at the current clock.
    fn warm(&mut self) {
        let table = self.table;
        self.cluster
            .run(|w| {
                let mut out = vec![0.0f32; table.width()];
                let step = w.workers() as u64;
                let mut row = w.id() as u64;
                while row < ROWS {
                    w.read(&table, row, &mut out)?;
                    row += step;
                }
                Ok(())
            })
            .expect("warm the cache");
    }

    /// One measurement of `iters` criterion iterations per worker: the slowest worker's
    /// time, scaled to one operation per iteration.
    fn measure(&mut self, op: Op, iters: u64) -> Duration {
        let table = self.table;
        let pretouch = op.pretouches();
        let ops = iters * u64::from(op.ops_per_iter());
        let times = self
            .cluster
            .run(|w| drive(w, &table, op, ops, pretouch))
            .expect("benchmark run");
        if pretouch {
            // The run ended with a CLOCK of up to ROWS rows per worker; wait until the
            // servers have applied it so it does not compete with the next sample.
            self.cluster.snapshot(&table).expect("settle");
        }
        let slowest = times.into_iter().max().unwrap_or_default();
        slowest / op.ops_per_iter()
    }
}

/// Adds the benchmark of `case` to `group`; its cluster starts only if the benchmark is
/// selected, and stops when it is done.
fn bench_case(group: &mut BenchmarkGroup<'_, WallTime>, case: Case) {
    let mut fixture: Option<Fixture> = None;
    group.bench_function(case.id(), |b| {
        let fixture = fixture.get_or_insert_with(|| Fixture::new(&case));
        b.iter_custom(|iters| fixture.measure(case.op, iters));
    });
    if let Some(mut fixture) = fixture {
        fixture.cluster.shutdown().expect("shut down");
    }
}

/// A group with the suite's timing settings.
fn group<'c>(c: &'c mut Criterion, name: &str) -> BenchmarkGroup<'c, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    group
}

/// The per-operation groups: every mode and worker count, `read` and `update` also with
/// [`WIDE`] rows.
fn hot_path(c: &mut Criterion) {
    let ops = [
        Op::Read,
        Op::ReadWith,
        Op::Update,
        Op::UpdateCol,
        Op::ReadUpdate,
        Op::Clock,
    ];
    for op in ops {
        let mut g = group(c, op.name());
        g.throughput(Throughput::Elements(1));
        let widths: &[usize] = if matches!(op, Op::Read | Op::Update) {
            &[WIDTH, WIDE]
        } else {
            &[WIDTH]
        };
        for &width in widths {
            for mode in MODES {
                for workers in WORKERS {
                    let case = Case {
                        op,
                        mode,
                        workers,
                        width,
                    };
                    bench_case(&mut g, case);
                }
            }
        }
        g.finish();
    }
}

/// What a `virtual_iteration` benchmark times.
#[derive(Debug, Clone, Copy)]
enum Iteration {
    /// [`Cluster::virtual_iteration`] of a [`Mode::Virtual`] cluster (recording, plus
    /// whatever the store then does to specialize).
    Virtual,
    /// A real iteration ([`Cluster::run`]) of a cluster in this mode.
    Real(Mode),
}

impl Iteration {
    fn name(self) -> String {
        match self {
            Iteration::Virtual => "virtual".to_string(),
            Iteration::Real(mode) => format!("real-{}", mode.name()),
        }
    }
}

/// `virtual_iteration`: one virtual iteration versus one real iteration, generic and
/// specialized, of the same [`ROWS`] READ+UPDATE steps and CLOCK per worker. Wall time of
/// the whole call, thread start-up included in all. A real iteration starts after the
/// previous one's CLOCK, so its reads need fresh rows from the servers.
fn virtual_vs_real(c: &mut Criterion) {
    let mut g = group(c, "virtual_iteration");
    g.sample_size(10);
    let kinds = [
        Iteration::Virtual,
        Iteration::Real(Mode::Generic),
        Iteration::Real(Mode::Virtual),
    ];
    for workers in WORKERS {
        for kind in kinds {
            let case = Case {
                op: Op::ReadUpdate,
                mode: match kind {
                    Iteration::Virtual => Mode::Virtual,
                    Iteration::Real(mode) => mode,
                },
                workers,
                width: WIDTH,
            };
            let mut fixture: Option<Fixture> = None;
            g.bench_function(format!("{}/{workers}w", kind.name()), |b| {
                let fixture = fixture.get_or_insert_with(|| Fixture::new(&case));
                let table = fixture.table;
                let one = |w: &mut Worker<'_>| iteration(w, &table, Op::ReadUpdate);
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        match kind {
                            Iteration::Virtual => fixture.cluster.virtual_iteration(one).map(drop),
                            Iteration::Real(_) => fixture.cluster.run(one).map(drop),
                        }
                        .expect("iteration");
                    }
                    start.elapsed()
                });
            });
            if let Some(mut fixture) = fixture {
                fixture.cluster.shutdown().expect("shut down");
            }
        }
    }
    g.finish();
}

criterion_group!(benches, hot_path, virtual_vs_real);
criterion_main!(benches);
