//! The same-answers harness: every scenario runs through the generic store, the
//! first-iteration-gathered store, the virtually-gathered store and the virtual store with
//! each specialization switched off in turn; under BSP every read any worker makes and the
//! final tables must be bit-identical to generic mode's. The virtual iteration may also
//! deviate from the real one (rows it never saw, rows it saw that are skipped).

use crate::util::within;
use iterstore::{Cluster, Config, Mode, SlabStores, Specializations, Staleness, Table, Worker};
use proptest::prelude::*;
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
enum Op {
    Read(u8, u64),
    Update(u8, u64),
    /// Column 0 or 1 alone (`update_col`), no column (2) or both (3) (`update_cols`).
    UpdateCol(u8, u64, usize),
    /// `read_update` of the row alone (0), with the next row of a table of the same
    /// element type (1), or of the row twice (2).
    ReadUpdate(u8, u64, u8),
}

/// `program[w][k]`: the ops of worker `w` during clock `k` of one iteration.
type Program = Vec<Vec<Vec<Op>>>;

const ROWS: u64 = 6;
/// Tables: three wide ones and two of 8-byte rows (kept in runs, several rows a block).
const TABLES: u8 = 5;
const ITERATIONS: u64 = 3;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        ((0u8..TABLES), (0..ROWS)).prop_map(|(t, r)| Op::Read(t, r)),
        ((0u8..TABLES), (0..ROWS)).prop_map(|(t, r)| Op::Update(t, r)),
        ((0u8..TABLES), (0..ROWS), (0usize..4)).prop_map(|(t, r, c)| Op::UpdateCol(t, r, c)),
        ((0u8..TABLES), (0..ROWS), (0u8..3)).prop_map(|(t, r, k)| Op::ReadUpdate(t, r, k)),
    ]
}

fn program() -> impl Strategy<Value = Program> {
    (1usize..=3).prop_flat_map(|workers| {
        prop::collection::vec(
            prop::collection::vec(prop::collection::vec(op(), 0..8), 1..=3),
            workers,
        )
    })
}

/// A store configuration under test.
#[derive(Debug, Clone, Copy)]
struct Variant {
    name: &'static str,
    mode: Mode,
    specs: Specializations,
    /// `Config::tape_budget`.
    tape_budget: Option<usize>,
    /// `Config::slab_stores`.
    slab_stores: SlabStores,
}

fn variants() -> Vec<Variant> {
    let all = Specializations::ALL;
    let off = |f: fn(&mut Specializations)| {
        let mut s = all;
        f(&mut s);
        s
    };
    vec![
        Variant {
            name: "generic",
            mode: Mode::Generic,
            specs: all,
            tape_budget: None,
            slab_stores: SlabStores::Auto,
        },
        Variant {
            name: "first-iter",
            mode: Mode::FirstIter,
            specs: all,
            tape_budget: None,
            slab_stores: SlabStores::Auto,
        },
        Variant {
            name: "virtual",
            mode: Mode::Virtual,
            specs: all,
            tape_budget: None,
            slab_stores: SlabStores::Auto,
        },
        Variant {
            name: "virtual-no-static-cache",
            mode: Mode::Virtual,
            specs: off(|s| s.static_cache = false),
            tape_budget: None,
            slab_stores: SlabStores::Auto,
        },
        Variant {
            name: "virtual-no-thread-caches",
            mode: Mode::Virtual,
            specs: off(|s| s.thread_caches = false),
            tape_budget: None,
            slab_stores: SlabStores::Auto,
        },
        Variant {
            name: "virtual-no-contiguous-index",
            mode: Mode::Virtual,
            specs: off(|s| s.contiguous_index = false),
            tape_budget: None,
            slab_stores: SlabStores::Auto,
        },
        Variant {
            name: "virtual-no-prefetch-batching",
            mode: Mode::Virtual,
            specs: off(|s| s.prefetch_batching = false),
            tape_budget: None,
            slab_stores: SlabStores::Auto,
        },
        Variant {
            name: "virtual-no-numa",
            mode: Mode::Virtual,
            specs: off(|s| s.numa = false),
            tape_budget: None,
            slab_stores: SlabStores::Auto,
        },
        Variant {
            // Every slab written with streaming stores (`Auto` never measures slabs this
            // small, so the others write plainly).
            name: "virtual-streaming-slabs",
            mode: Mode::Virtual,
            specs: all,
            tape_budget: None,
            slab_stores: SlabStores::Streaming,
        },
        Variant {
            // Op tapes of 3 steps: most accesses take the indexed path.
            name: "virtual-tape-budget-12-bytes",
            mode: Mode::Virtual,
            specs: all,
            tape_budget: Some(12),
            slab_stores: SlabStores::Auto,
        },
    ]
}

struct Tables {
    f: Table<f64>,
    g: Table<f32>,
    i: Table<i64>,
    /// 8-byte rows: one float, two 32-bit integers.
    n: Table<f64>,
    m: Table<i32>,
}

impl Tables {
    fn create(cluster: &mut Cluster) -> iterstore::Result<Self> {
        Ok(Tables {
            f: cluster.create_table("f", 3)?,
            g: cluster.create_table("g", 5)?,
            i: cluster.create_table("i", 2)?,
            n: cluster.create_table("n", 1)?,
            m: cluster.create_table("m", 2)?,
        })
    }
}

/// A value that depends on everything about the op, with float rounding to exercise order.
fn value(w: usize, iteration: u64, clock: usize, n: usize) -> f64 {
    let h = (w as u64 * 7919 + iteration * 104_729 + clock as u64 * 1299 + n as u64 * 31) % 1009;
    h as f64 * 0.37 - 150.3
}

/// Runs one iteration of `program` on `w`, returning the bits of every value it read.
fn iteration(
    w: &mut Worker<'_>,
    t: &Tables,
    program: &Program,
    it: u64,
) -> iterstore::Result<Vec<u64>> {
    let me = w.id();
    let mut seen = Vec::new();
    for (clock, ops) in program[me].iter().enumerate() {
        for (n, op) in ops.iter().enumerate() {
            let v = value(me, it, clock, n);
            match *op {
                Op::Read(0, r) => {
                    let mut b = [0.0f64; 3];
                    w.read(&t.f, r, &mut b)?;
                    seen.extend(b.iter().map(|x| x.to_bits()));
                }
                Op::Read(1, r) => {
                    seen.extend(w.read_with(&t.g, r, |b| {
                        b.iter().map(|x| x.to_bits() as u64).collect::<Vec<_>>()
                    })?);
                }
                Op::Read(2, r) if r % 2 == 0 => {
                    let mut b = [0i64; 2];
                    w.read(&t.i, r, &mut b)?;
                    seen.extend(b.iter().map(|x| *x as u64));
                }
                Op::Read(2, r) => {
                    seen.extend(
                        w.read_with(&t.i, r, |b| b.iter().map(|x| *x as u64).collect::<Vec<_>>())?,
                    );
                }
                Op::Read(3, r) if r % 2 == 0 => {
                    let mut b = [0.0f64];
                    w.read(&t.n, r, &mut b)?;
                    seen.push(b[0].to_bits());
                }
                Op::Read(3, r) => seen.push(w.read_with(&t.n, r, |b| b[0].to_bits())?),
                Op::Read(_, r) if r % 2 == 1 => {
                    let mut b = [0i32; 2];
                    w.read(&t.m, r, &mut b)?;
                    seen.extend(b.iter().map(|x| *x as u64));
                }
                Op::Read(_, r) => {
                    seen.extend(
                        w.read_with(&t.m, r, |b| b.iter().map(|x| *x as u64).collect::<Vec<_>>())?,
                    );
                }
                Op::Update(0, r) => w.update(&t.f, r, &[v, -v * 0.5, 1e-3 * v])?,
                Op::Update(1, r) => w.update(&t.g, r, &[v as f32; 5])?,
                Op::Update(2, r) => w.update(&t.i, r, &[v as i64, 1])?,
                Op::Update(3, r) => w.update(&t.n, r, &[v * 1e-2])?,
                Op::Update(_, r) => w.update(&t.m, r, &[v as i32, -1])?,
                Op::UpdateCol(0, r, c) => update_cols(w, &t.f, r, c, v)?,
                Op::UpdateCol(1, r, c) => update_cols(w, &t.g, r, c, v as f32)?,
                Op::UpdateCol(2, r, c) => update_cols(w, &t.i, r, c, v as i64)?,
                Op::UpdateCol(3, r, c) => match c {
                    0 | 1 => w.update_col(&t.n, r, 0, v)?,
                    2 => w.update_cols(&t.n, r, &[])?,
                    _ => w.update_cols(&t.n, r, &[(0, v), (0, -v * 0.25)])?,
                },
                Op::UpdateCol(_, r, c) => update_cols(w, &t.m, r, c, v as i32)?,
                Op::ReadUpdate(tab, r, k) => {
                    let next = if k == 2 { r } else { (r + 1) % ROWS };
                    match tab {
                        // f64 rows of two widths, paired with each other.
                        0 => read_update(w, (&t.f, r), (&t.n, next), k, v, &mut seen)?,
                        3 => read_update(w, (&t.n, r), (&t.f, next), k, v, &mut seen)?,
                        1 => read_update(w, (&t.g, r), (&t.g, next), k, v as f32, &mut seen)?,
                        2 => read_update(w, (&t.i, r), (&t.i, next), k, v as i64, &mut seen)?,
                        _ => read_update(w, (&t.m, r), (&t.m, next), k, v as i32, &mut seen)?,
                    }
                }
            }
        }
        w.clock()?;
    }
    Ok(seen)
}

/// A sparse update of `row`: column `c` alone for `c < 2` (`update_col`), else
/// `update_cols` with no column (2) or columns 1 then 0 (3).
fn update_cols<T: iterstore::Element + std::ops::Neg<Output = T>>(
    w: &mut Worker<'_>,
    table: &Table<T>,
    row: u64,
    c: usize,
    v: T,
) -> iterstore::Result<()> {
    match c {
        0 | 1 => w.update_col(table, row, c, v),
        2 => w.update_cols(table, row, &[]),
        _ => w.update_cols(table, row, &[(1, v), (0, -v)]),
    }
}

/// `read_update` of `a`'s row alone (`k == 0`) or with `b`'s (else), recording the
/// bits it reads; the deltas are `v` and its multiples, not the rows read (so that
/// under SSP the final tables do not depend on timing).
fn read_update<T: iterstore::Element + Copy + std::ops::Add<Output = T>>(
    w: &mut Worker<'_>,
    (a, ra): (&Table<T>, u64),
    (b, rb): (&Table<T>, u64),
    k: u8,
    v: T,
    seen: &mut Vec<u64>,
) -> iterstore::Result<()> {
    let bits = |x: &T| {
        let mut word = [0u8; 8];
        let raw = bytemuck::bytes_of(x);
        word[..raw.len()].copy_from_slice(raw);
        u64::from_le_bytes(word)
    };
    let fill = |d: &mut [T]| {
        let mut x = v;
        for e in d {
            *e = x;
            x = x + v;
        }
    };
    let mut da = vec![T::default(); a.width()];
    if k == 0 {
        return w.read_update([(a, ra)], [&mut da], |[x], [d]| {
            seen.extend(x.iter().map(bits));
            fill(d);
        });
    }
    let mut db = vec![T::default(); b.width()];
    w.read_update([(a, ra), (b, rb)], [&mut da, &mut db], |[x, y], [d, e]| {
        seen.extend(x.iter().chain(y).map(bits));
        fill(d);
        fill(e);
    })
}

/// What a run produced: per iteration per worker the read values, and the final tables.
type Outcome = (Vec<Vec<Vec<u64>>>, Vec<(u64, Vec<u64>)>);

fn run(variant: Variant, staleness: Staleness, real: &Program, gathered: &Program) -> Outcome {
    run_on(1, variant, staleness, real, gathered)
}

/// How the processes of [`run_on_with`] are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// In one OS process over the in-process transport.
    InProcess,
    /// Each with its own `Cluster::start` over TCP on loopback.
    Tcp,
}

fn run_on(
    processes: usize,
    variant: Variant,
    staleness: Staleness,
    real: &Program,
    gathered: &Program,
) -> Outcome {
    run_on_with(
        Wire::InProcess,
        processes,
        variant,
        staleness,
        real,
        gathered,
    )
}

/// [`run`] on `processes` processes connected by `wire`, splitting the program's workers
/// evenly between them; the reads are gathered in global worker order, and every process
/// must see the same final tables.
fn run_on_with(
    wire: Wire,
    processes: usize,
    variant: Variant,
    staleness: Staleness,
    real: &Program,
    gathered: &Program,
) -> Outcome {
    let workers = real.len();
    assert_eq!(
        workers % processes,
        0,
        "{workers} workers on {processes} processes"
    );
    let mut config = Config::new(workers / processes)
        .with_shards(2)
        .with_staleness(staleness)
        .with_mode(variant.mode)
        .with_specializations(variant.specs);
    config.prefetch_chunks = 2;
    config.contention_threshold = 0.0; // every shared row gets per-thread copies
    config.tape_budget = variant.tape_budget;
    config.slab_stores = variant.slab_stores;
    let (real, gathered) = (real.clone(), gathered.clone());
    within(30, move || {
        let body = |cluster: &mut Cluster| process(cluster, variant, &real, &gathered);
        let per_process = match wire {
            _ if processes == 1 => vec![body(&mut Cluster::start(config).unwrap()).unwrap()],
            Wire::InProcess => Cluster::run_local_processes(config, processes, body).unwrap(),
            Wire::Tcp => crate::util::over_tcp(config, processes, body),
        };
        let tables = per_process[0].1.clone();
        let mut reads: Vec<Vec<Vec<u64>>> = vec![Vec::new(); ITERATIONS as usize];
        for (rank, (r, t)) in per_process.into_iter().enumerate() {
            assert!(
                t == tables,
                "process {rank} sees other tables than process 0"
            );
            for (it, per_worker) in r.into_iter().enumerate() {
                reads[it].extend(per_worker);
            }
        }
        (reads, tables)
    })
}

/// One process's part of [`run_on`].
fn process(
    cluster: &mut Cluster,
    variant: Variant,
    real: &Program,
    gathered: &Program,
) -> iterstore::Result<Outcome> {
    let t = Tables::create(cluster)?;
    if variant.mode == Mode::Virtual {
        cluster.virtual_iteration(|w| iteration(w, &t, gathered, 0))?;
    }
    let mut reads = Vec::new();
    for it in 0..ITERATIONS {
        reads.push(cluster.run(|w| iteration(w, &t, real, it))?);
    }
    let mut tables = Vec::new();
    // Rows never written may be present as zeros or absent: compare the others.
    let mut keep = |row: u64, bits: Vec<u64>| {
        if bits.iter().any(|b| *b != 0) {
            tables.push((row, bits));
        }
    };
    for (row, v) in cluster.snapshot(&t.f)? {
        keep(row, v.iter().map(|x| x.to_bits()).collect());
    }
    for (row, v) in cluster.snapshot(&t.g)? {
        keep(row + 100, v.iter().map(|x| x.to_bits() as u64).collect());
    }
    for (row, v) in cluster.snapshot(&t.i)? {
        keep(row + 200, v.iter().map(|x| *x as u64).collect());
    }
    for (row, v) in cluster.snapshot(&t.n)? {
        keep(row + 300, vec![v[0].to_bits()]);
    }
    for (row, v) in cluster.snapshot(&t.m)? {
        keep(row + 400, v.iter().map(|x| *x as u64).collect());
    }
    Ok((reads, tables))
}

/// The program with some ops of every worker dropped and reads of unseen rows added.
fn deviate(program: &Program) -> Program {
    program
        .iter()
        .map(|clocks| {
            clocks
                .iter()
                .map(|ops| {
                    let mut kept: Vec<Op> = ops.iter().copied().step_by(2).collect();
                    kept.push(Op::Read(0, ROWS + 3));
                    kept
                })
                .collect()
        })
        .collect()
}

fn assert_same_everywhere(program: &Program, gathered: &Program) -> Result<(), TestCaseError> {
    let baseline = run(variants()[0], Staleness::BSP, program, gathered);
    for v in variants().into_iter().skip(1) {
        let got = run(v, Staleness::BSP, program, gathered);
        prop_assert!(got.0 == baseline.0, "{}: reads differ from generic", v.name);
        prop_assert!(
            got.1 == baseline.1,
            "{}: final tables differ from generic",
            v.name
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn bsp_every_mode_and_ablation_is_bit_identical_to_generic(p in program()) {
        assert_same_everywhere(&p, &p)?;
    }

    #[test]
    fn p_processes_compute_what_one_process_of_as_many_workers_computes(
        p in prop::collection::vec(
            prop::collection::vec(prop::collection::vec(op(), 0..8), 1..=3),
            4,
        ),
        staleness in prop_oneof![Just(Staleness::BSP), Just(Staleness::Bounded(1))],
    ) {
        // Under BSP every read and the final tables are bit-identical; under SSP (where
        // what a read sees depends on timing) the final tables still are.
        let baseline = run(variants()[0], staleness, &p, &p);
        for v in variants().into_iter().take(3) {
            for processes in [1, 2, 4] {
                let got = run_on(processes, v, staleness, &p, &p);
                if staleness == Staleness::BSP {
                    prop_assert!(got.0 == baseline.0, "{} on {processes} processes: reads differ", v.name);
                }
                prop_assert!(got.1 == baseline.1, "{} on {processes} processes: tables differ", v.name);
            }
        }
    }

    #[test]
    fn a_deviating_real_iteration_still_gives_identical_answers(p in program()) {
        // The virtual iteration saw a different program than the one that really runs.
        assert_same_everywhere(&p, &deviate(&p))?;
    }
}

/// Several updates of a row then a read of it, in every table: float addition is not
/// associative, so a store that folded each update into a cached row would read other
/// bits than one that adds the summed updates to the snapshot.
#[test]
fn reads_after_repeated_updates_are_bit_identical() {
    let clock: Vec<Op> = (0u8..TABLES)
        .flat_map(|t| {
            [
                Op::Update(t, 1),
                Op::Update(t, 1),
                Op::UpdateCol(t, 1, 1),
                Op::Read(t, 1),
                Op::Update(t, 1),
                Op::Read(t, 1),
            ]
        })
        .collect();
    let program: Program = vec![vec![clock.clone(), clock]; 2];
    assert_same_everywhere(&program, &program).unwrap();
}

#[test]
fn specialized_modes_keep_the_ssp_bound() {
    // The counter-instrumented SSP properties, through the specialized store.
    crate::ssp_props::check_specialized_ssp();
}

/// The specializations are really in use (the harness above would pass if they silently
/// fell back to the generic path).
#[test]
fn specialized_modes_use_the_arena_and_generic_mode_does_not() {
    let program: Program = (0..2)
        .map(|w| {
            vec![(0..ROWS)
                .flat_map(|r| [Op::Read(0, r), Op::Update(0, r), Op::Read(2, 0)])
                .chain([Op::Read(1, w)])
                .collect()]
        })
        .collect();
    let stats =
        |mode: Mode, specs: Specializations| stats_of(&program, &program, mode, specs, None);
    let generic = stats(Mode::Generic, Specializations::ALL);
    assert!(
        generic.row_fetches > 0 && generic.arena_refreshes == 0,
        "{generic:?}"
    );
    assert_eq!(generic.specialize_time, Duration::ZERO, "{generic:?}");
    assert_eq!(generic.tape_accesses, 0, "{generic:?}");
    assert_eq!(generic.memory.current(), 0, "{generic:?}");
    let special = stats(Mode::Virtual, Specializations::ALL);
    assert_eq!(special.row_fetches, 0, "{special:?}");
    assert!(special.specialize_time > Duration::ZERO, "{special:?}");
    assert!(special.arena_refreshes > 0, "{special:?}");
    // Following the pattern, every refresh is the prefetch of one clock's chunks, asked
    // once for the process's two workers, whichever asks second: the first read's, then
    // one at each CLOCK of the 3 iterations (one a clock).
    assert_eq!(special.clock_refreshes, 4, "{special:?}");
    assert_eq!(
        special.clock_refreshes, special.arena_refreshes,
        "{special:?}"
    );
    assert_eq!(special.planned_rows, ROWS as usize + 3, "{special:?}");
    // Row (i, 0) is read by both workers in every step: (12 of 38 accesses) x 2 threads
    // = 0.63 >= 0.5, so it alone gets per-thread copies (the f rows score 0.21).
    assert_eq!(special.thread_cached_rows, 2, "{special:?}");
    // Every access of the 3 iterations found its row on the op tape.
    assert_eq!(special.tape_accesses, 3 * 38, "{special:?}");
    assert_eq!(special.indexed_accesses, 0, "{special:?}");
    assert_eq!(special.unplanned_accesses, 0, "{special:?}");
    // The tapes are 4 bytes per access and the pattern gave its sequences up to them.
    let m = special.memory;
    assert_eq!(m.tapes, 38 * 4, "{m:?}");
    assert!(
        m.gathered_logs >= 38 * 4 && m.gathered_pattern >= 38 * 4,
        "{m:?}"
    );
    assert!(m.pattern < m.gathered_pattern, "{m:?}");
    assert!(m.plan > 0 && m.blocks > 0, "{m:?}");
    // Each of the 2 workers keeps 8 bytes per plan slot (its copy and block; the row,
    // chunk and arena word are the plan's, shared): no more than an 8-byte row.
    assert_eq!(m.slot_tables, 2 * 8 * special.planned_rows, "{m:?}");
    assert!(
        m.thread_copies > 0 && m.process_arena > 0 && m.server_arenas > 0,
        "{m:?}"
    );
    let mut no_static = Specializations::ALL;
    no_static.static_cache = false;
    let fallback = stats(Mode::Virtual, no_static);
    assert!(
        fallback.row_fetches > 0 && fallback.planned_rows == 0,
        "{fallback:?}"
    );
}

/// 8-byte rows a worker updates share blocks (runs), so their bookkeeping (headers and
/// the per-row table) is no larger than the rows: the blocks hold each such row's delta
/// (and view, when the worker reads its rows more than once a clock) and at most 8 bytes
/// more. Rows of a wide table keep a 32-byte header each.
#[test]
fn eight_byte_rows_cost_no_more_bookkeeping_than_their_data() {
    const N: u64 = 300;
    let per_worker = |t: u8| -> Program {
        (0..2u64)
            .map(|w| {
                vec![(0..N)
                    .flat_map(|r| [Op::Read(t, w * N + r), Op::Update(t, w * N + r)])
                    .collect()]
            })
            .collect()
    };
    let narrow = per_worker(3);
    let s = stats_of(&narrow, &narrow, Mode::Virtual, Specializations::ALL, None);
    assert_eq!(s.tape_accesses, 3 * 2 * 2 * N, "{s:?}");
    let rows = 2 * N as usize;
    assert!(
        s.memory.blocks <= rows * (16 + 8),
        "{} bytes of blocks for {rows} rows of 8 bytes: {s:?}",
        s.memory.blocks
    );
    // The same accesses on a table of 24-byte rows: a header of 32 bytes a row, and the
    // delta; no view, as each worker reads its rows once a clock.
    let wide = per_worker(0);
    let w = stats_of(&wide, &wide, Mode::Virtual, Specializations::ALL, None);
    assert_eq!(w.view_workers, 0, "{w:?}");
    assert!(w.memory.blocks >= rows * (32 + 24), "{w:?}");
    // Read twice a clock, each row's block holds a view of it as well.
    let twice: Program = (0..2u64)
        .map(|w| {
            vec![(0..N)
                .flat_map(|r| [Op::Read(0, w * N + r), Op::Update(0, w * N + r)])
                .chain((0..N).map(|r| Op::Read(0, w * N + r)))
                .collect()]
        })
        .collect();
    let t = stats_of(&twice, &twice, Mode::Virtual, Specializations::ALL, None);
    assert_eq!(t.view_workers, 2, "{t:?}");
    assert!(t.memory.blocks >= rows * (32 + 48), "{t:?}");
}

/// Accesses off the op tape are counted by how they were served: a real iteration that
/// deviates from the gathered one, and tapes truncated to a budget.
#[test]
fn accesses_off_the_tape_are_counted() {
    let program = read_update_every_row();
    // The real iteration reads a row the virtual one never touched, once per worker.
    let mut real = program.clone();
    for w in &mut real {
        w[0].insert(0, Op::Read(0, ROWS + 5));
    }
    let s = stats_of(&real, &program, Mode::Virtual, Specializations::ALL, None);
    assert_eq!(s.unplanned_accesses, 3 * 2, "{s:?}");
    assert_eq!(s.tape_accesses, 3 * 2 * 2 * ROWS, "{s:?}");
    assert_eq!(s.indexed_accesses, 0, "{s:?}");
    // Room for 5 steps per worker: the other 7 accesses of each take the index.
    let s = stats_of(
        &program,
        &program,
        Mode::Virtual,
        Specializations::ALL,
        Some(40),
    );
    assert_eq!(s.tape_truncated, 2 * 7, "{s:?}");
    assert_eq!(s.memory.tapes, 40, "{s:?}");
    assert_eq!(s.tape_accesses, 3 * 2 * 5, "{s:?}");
    assert_eq!(s.indexed_accesses, 3 * 2 * 7, "{s:?}");
}

/// A sparse update of any number of columns, none included, is one step of the op tape:
/// an LDA-like iteration (read a row, then update it at two columns or at none) runs
/// entirely on the tape, and the counts come out as the updates say.
#[test]
fn sparse_updates_of_any_columns_follow_the_tape() {
    let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::Virtual)).unwrap();
    let t = cluster.create_table::<i32>("counts", 4).unwrap();
    let sweep = |w: &mut Worker<'_>| -> iterstore::Result<()> {
        for r in 0..ROWS {
            let moved = w.read_with(&t, r, |row| row[0] % 4 == 0)?;
            let cols: &[(usize, i32)] = if moved { &[(0, 1), (3, -1)] } else { &[] };
            w.update_cols(&t, r, cols)?;
        }
        w.clock()
    };
    cluster.virtual_iteration(|w| sweep(w)).unwrap();
    for _ in 0..3 {
        cluster.run(|w| sweep(w)).unwrap();
    }
    let s = cluster.stats();
    assert_eq!(s.plans, 1, "{s:?}");
    assert_eq!(s.tape_accesses, 3 * 2 * 2 * ROWS, "{s:?}");
    assert_eq!((s.indexed_accesses, s.unplanned_accesses), (0, 0), "{s:?}");
    // Column 0 rises while it is a multiple of 4: both workers add 1 in the first run
    // (0 -> 2), then update no column in the other two. Column 3 falls alike.
    for (_, row) in cluster.snapshot(&t).unwrap() {
        assert_eq!(row, [2, 0, 0, -2]);
    }
    let err = cluster
        .run(|w| w.update_cols(&t, 0, &[(1, 1), (4, 1)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("column 4"), "{err}");
}

/// A run that fails keeps the op tapes: the next run still follows them, with rows of
/// their own blocks and with 8-byte rows in runs.
#[test]
fn a_failed_run_keeps_the_op_tapes() {
    failed_run_keeps_the_op_tapes::<2>();
    failed_run_keeps_the_op_tapes::<1>();
}

fn failed_run_keeps_the_op_tapes<const W: usize>() {
    let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::Virtual)).unwrap();
    let t = cluster.create_table::<f64>("t", W).unwrap();
    let body = |w: &mut Worker<'_>, fail: bool| {
        for r in 0..4 {
            let mut row = [0.0; W];
            w.read(&t, r, &mut row)?;
            w.update(&t, r, &[1.5; W])?;
            if fail && r == 1 && w.id() == 1 {
                return Err(iterstore::Error::app(1, "stop"));
            }
        }
        w.clock()
    };
    cluster.virtual_iteration(|w| body(w, false)).unwrap();
    cluster.run(|w| body(w, false)).unwrap();
    assert!(cluster.run(|w| body(w, true)).is_err());
    let before = cluster.stats();
    cluster.run(|w| body(w, false)).unwrap();
    let after = cluster.stats();
    assert_eq!(after.tape_accesses - before.tape_accesses, 16, "{after:?}");
    assert_eq!(after.indexed_accesses, before.indexed_accesses, "{after:?}");
    cluster.shutdown().unwrap();
}

/// Runs `real` for 3 iterations on a store that gathered `gathered`; its stats.
fn stats_of(
    real: &Program,
    gathered: &Program,
    mode: Mode,
    specs: Specializations,
    tape_budget: Option<usize>,
) -> iterstore::stats::Stats {
    let mut config = Config::new(2).with_mode(mode).with_specializations(specs);
    config.contention_threshold = 0.5;
    config.tape_budget = tape_budget;
    stats_with(real, gathered, config)
}

/// The cluster's statistics after 3 iterations of `real` on a store of `config` (2
/// workers), the pattern gathered from `gathered` in virtual mode.
fn stats_with(real: &Program, gathered: &Program, config: Config) -> iterstore::stats::Stats {
    let (program, gathered) = (real.clone(), gathered.clone());
    within(30, move || {
        let mode = config.mode;
        let mut cluster = Cluster::start(config).unwrap();
        let t = Tables::create(&mut cluster).unwrap();
        if mode == Mode::Virtual {
            cluster
                .virtual_iteration(|w| iteration(w, &t, &gathered, 0))
                .unwrap();
        }
        for it in 0..3 {
            cluster.run(|w| iteration(w, &t, &program, it)).unwrap();
        }
        cluster.stats()
    })
}

/// Streaming slab stores are used when asked for (and counted), and `Auto` writes slabs
/// too small to time plainly.
#[test]
#[cfg(target_arch = "x86_64")]
fn streaming_slab_stores_are_taken_when_asked_for() {
    let program = read_update_every_row();
    let streamed = |stores: SlabStores| {
        let mut config = Config::new(2)
            .with_mode(Mode::Virtual)
            .with_slab_stores(stores);
        config.shards = 2;
        stats_with(&program, &program, config)
    };
    let on = streamed(SlabStores::Streaming);
    assert!(on.partial_slabs + on.whole_slabs > 0, "{on:?}");
    assert_eq!(
        on.streamed_slabs,
        on.partial_slabs + on.whole_slabs,
        "{on:?}"
    );
    for stores in [SlabStores::Plain, SlabStores::Auto] {
        let off = streamed(stores);
        assert!(off.partial_slabs + off.whole_slabs > 0, "{off:?}");
        assert_eq!(off.streamed_slabs, 0, "{stores:?}: {off:?}");
    }
}

/// Two workers, each reading then updating every row of table 0 in one clock.
fn read_update_every_row() -> Program {
    (0..2)
        .map(|_| {
            vec![(0..ROWS)
                .flat_map(|r| [Op::Read(0, r), Op::Update(0, r)])
                .collect()]
        })
        .collect()
}

/// [`stats_of`] for virtual mode with every specialization and no tape budget, the run
/// the same program as the gathered one.
fn virtual_stats(program: &Program) -> iterstore::stats::Stats {
    stats_of(program, program, Mode::Virtual, Specializations::ALL, None)
}

/// The report types serialize by field name, so an application can write them out whole:
/// a real run's `Stats` (with its `SpecialMemory` nested) and the `NumaReport` as JSON.
#[test]
fn stats_serialize_to_json_by_field_name() {
    let stats = virtual_stats(&read_update_every_row());
    assert!(
        stats.tape_accesses > 0 && stats.memory.tapes > 0,
        "{stats:?}"
    );
    let json = serde_json::to_value(stats).unwrap();
    assert_eq!(json["plans"], 1, "{json}");
    assert_eq!(json["tape_accesses"], stats.tape_accesses, "{json}");
    assert_eq!(json["indexed_accesses"], 0, "{json}");
    assert_eq!(json["memory"]["tapes"], stats.memory.tapes, "{json}");
    let time = &json["specialize_time"];
    assert_eq!(time["secs"], stats.specialize_time.as_secs(), "{json}");
    assert_eq!(
        time["nanos"],
        stats.specialize_time.subsec_nanos(),
        "{json}"
    );

    let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::Virtual)).unwrap();
    let numa = cluster.numa().expect("numa applies in virtual mode");
    let json = serde_json::to_value(&numa).unwrap();
    assert_eq!(json["zones"], numa.zones, "{json}");
    assert_eq!(
        json["worker_zones"].as_array().map(Vec::len),
        Some(2),
        "{json}"
    );
    cluster.shutdown().unwrap();
}

/// In first-iter mode an `init_run` is never the gathered run: the first ordinary run is,
/// and the store specializes once, for it.
#[test]
fn first_iter_gathers_the_first_run_after_init_runs() {
    let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::FirstIter)).unwrap();
    let t = cluster.create_table::<f32>("t", 2).unwrap();
    cluster
        .init_run(|w| {
            for row in 100..110 {
                w.update(&t, row, &[1.0, 1.0])?;
            }
            w.clock()
        })
        .unwrap();
    assert!(
        cluster.access_pattern().is_none(),
        "init runs are not gathered"
    );
    assert_eq!(cluster.stats().plans, 0);
    cluster
        .run(|w| {
            let mut out = [0.0f32; 2];
            w.read(&t, w.id() as u64, &mut out)?;
            w.update(&t, w.id() as u64, &[1.0, 0.0])?;
            w.clock()
        })
        .unwrap();
    let rows: Vec<u64> = cluster
        .access_pattern()
        .expect("the first ordinary run is gathered")
        .rows()
        .iter()
        .map(|r| r.key.row)
        .collect();
    assert_eq!(rows, vec![0, 1]);
    assert_eq!(cluster.stats().plans, 1);
    assert_eq!(cluster.stats().planned_rows, 2);
    cluster.shutdown().unwrap();
}

/// Updates made after a run's last CLOCK are sent when the run ends, in every mode: the
/// specialized delta buffer is flushed like the generic log.
#[test]
fn updates_after_the_last_clock_are_not_lost() {
    for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
        let mut cluster = Cluster::start(Config::new(2).with_mode(mode)).unwrap();
        let t = cluster.create_table::<i64>("t", 3).unwrap();
        let body = |w: &mut Worker<'_>| {
            w.update(&t, w.id() as u64, &[1, 2, 3])?;
            w.clock()?;
            w.update(&t, 5, &[10, 0, 0]) // no CLOCK after this one
        };
        cluster.virtual_iteration(body).unwrap();
        for _ in 0..3 {
            cluster.run(body).unwrap();
        }
        let snapshot = cluster.snapshot(&t).unwrap();
        let row = |r: u64| {
            snapshot
                .iter()
                .find(|(k, _)| *k == r)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(row(0), Some(vec![3, 6, 9]), "{mode:?}");
        assert_eq!(row(5), Some(vec![60, 0, 0]), "{mode:?}");
        cluster.shutdown().unwrap();
    }
}

/// Read-my-writes of float rows under SSP in every mode and ablation: a worker's reads of
/// the row only it updates show every update it made, including those already sent but
/// not yet in the (stale) snapshot it reads. The values are small integers, exact in
/// floating point, so the expected value is exact.
#[test]
fn float_rows_keep_read_my_writes_under_ssp() {
    const CLOCKS: usize = 4;
    for staleness in [Staleness::Bounded(1), Staleness::Bounded(3)] {
        for variant in variants() {
            let name = variant.name;
            let config = Config::new(2)
                .with_mode(variant.mode)
                .with_specializations(variant.specs)
                .with_staleness(staleness);
            let failures = ssp_failures(config, 3, move |w, t, counted| {
                let (me, other) = (w.id() as u64, 1 - w.id() as u64);
                let mut bad = Vec::new();
                let mut row = [0.0f32; 3];
                for clock in 0..CLOCKS {
                    for n in 0..2 {
                        // Two updates a step, the second through a held row.
                        w.update(t, me, &[1.0, 2.0, 0.5])?;
                        let mine = (w.current_clock() as usize * 4 + n * 2 + 1) as f32;
                        let mut held = 0.0;
                        let mut d = [0.0f32; 3];
                        w.read_update([(t, me)], [&mut d], |[r], [d]| {
                            held = r[0];
                            d.copy_from_slice(&[1.0, 2.0, 0.5]);
                        })?;
                        w.read(t, me, &mut row)?;
                        w.read(t, other, &mut [0.0; 3])?;
                        if counted && (held != mine || row[0] != mine + 1.0) {
                            bad.push(format!(
                                "clock {clock}: read {held} then {} want {mine} then {}",
                                row[0],
                                mine + 1.0
                            ));
                        }
                    }
                    w.clock()?;
                }
                Ok(bad)
            });
            assert!(failures.is_empty(), "{name} {staleness:?}: {failures:?}");
        }
    }
}

/// A program of `workers` workers drawn from `seed` (for tests that are too slow to run
/// under proptest's many cases).
fn seeded_program(seed: u64, workers: usize) -> Program {
    let mut x = seed;
    let mut next = move |n: u64| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) % n
    };
    (0..workers)
        .map(|_| {
            (0..3)
                .map(|_| {
                    (0..next(8))
                        .map(|_| {
                            let (t, r) = (next(3) as u8, next(ROWS));
                            match next(3) {
                                0 => Op::Read(t, r),
                                1 => Op::Update(t, r),
                                _ => Op::UpdateCol(t, r, next(4) as usize),
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

#[test]
fn processes_over_tcp_compute_what_one_process_of_as_many_workers_computes() {
    for seed in [1, 2] {
        let p = seeded_program(seed, 4);
        let baseline = run(variants()[0], Staleness::BSP, &p, &p);
        for v in variants().into_iter().take(3) {
            for processes in [2, 4] {
                let got = run_on_with(Wire::Tcp, processes, v, Staleness::BSP, &p, &p);
                assert!(
                    got.0 == baseline.0,
                    "{} on {processes} TCP processes: reads differ",
                    v.name
                );
                assert!(
                    got.1 == baseline.1,
                    "{} on {processes} TCP processes: tables differ",
                    v.name
                );
            }
        }
    }
}

#[test]
fn refreshes_ship_only_changed_rows_and_give_the_same_answers() {
    // Every clock, each worker reads every row and updates only its own: after the first
    // refresh of a chunk, each one carries only the rows that changed.
    let program: Program = (0..2)
        .map(|w| {
            (0..3)
                .map(|_| {
                    (0..ROWS)
                        .map(|r| Op::Read(0, r))
                        .chain([Op::Update(0, w)])
                        .collect()
                })
                .collect()
        })
        .collect();
    let special = virtual_stats(&program);
    assert!(special.whole_chunk_refreshes > 0, "{special:?}");
    assert!(special.partial_chunk_refreshes > 0, "{special:?}");
    // In one OS process every refresh is written by a shard of it, none sent.
    assert_eq!(
        special.local_chunk_refreshes,
        special.whole_chunk_refreshes + special.partial_chunk_refreshes,
        "{special:?}"
    );
    let generic = run(variants()[0], Staleness::BSP, &program, &program);
    let virt = run(variants()[2], Staleness::BSP, &program, &program);
    assert!(
        virt == generic,
        "virtual mode's reads or tables differ from generic's"
    );
    for staleness in [Staleness::Bounded(1), Staleness::Unbounded] {
        let g = run(variants()[0], staleness, &program, &program);
        let v = run(variants()[2], staleness, &program, &program);
        assert!(v.1 == g.1, "{staleness:?}: tables differ");
    }
}

#[test]
fn clocks_ship_only_the_touched_rows_and_give_the_same_answers() {
    // Each clock a worker updates one of the rows it updates over the iteration (as an
    // MF mini-batch does): its slab to a shard is mostly zeros, so only touched rows go.
    let program: Program = (0..2)
        .map(|w| {
            (0..3)
                .map(|k| {
                    vec![
                        Op::Read(0, k),
                        Op::Update(0, (k + w) % ROWS),
                        Op::Update(0, 3 + k),
                    ]
                })
                .collect()
        })
        .collect();
    let special = virtual_stats(&program);
    assert!(special.partial_slabs > 0, "{special:?}");
    let generic = run(variants()[0], Staleness::BSP, &program, &program);
    for v in variants().into_iter().skip(1) {
        assert!(
            run(v, Staleness::BSP, &program, &program) == generic,
            "{}",
            v.name
        );
    }
    let g = run(variants()[0], Staleness::Bounded(2), &program, &program);
    let s = run(variants()[2], Staleness::Bounded(2), &program, &program);
    assert!(s.1 == g.1, "SSP tables differ");
}

/// With rows of several widths in a shard (24-byte rows of `f`, 8-byte rows of `n`), a
/// CLOCK sends the touched rows alone exactly when they and their positions (4 bytes
/// each) take fewer bytes than the whole slab (here 6 · 24 + 6 · 8 = 192 bytes): where
/// neither the narrowest nor the widest row decides, their bytes are counted.
#[test]
fn a_slab_of_rows_of_several_widths_is_sparse_exactly_when_smaller() {
    let f = |rows: std::ops::Range<u64>| rows.map(|r| Op::Update(0, r));
    let n = |rows: std::ops::Range<u64>| rows.map(|r| Op::Update(3, r));
    let clocks = vec![
        // Every row: 12 rows, 192 + 48 bytes: whole.
        f(0..6).chain(n(0..6)).collect::<Vec<_>>(),
        // 7 rows, 6 · 24 + 8 + 28 = 180 bytes: sparse, though 7 of the widest would not be.
        f(0..6).chain(n(0..1)).collect(),
        // 9 rows, 144 + 24 + 36 = 204 bytes: whole, though 9 of the narrowest would be sparse.
        f(0..6).chain(n(0..3)).collect(),
    ];
    let program: Program = vec![clocks; 2];
    let special = virtual_stats(&program);
    // 2 workers, 3 iterations, one slab a clock: one sparse and two whole an iteration.
    assert_eq!(
        (special.partial_slabs, special.whole_slabs),
        (6, 12),
        "{special:?}"
    );
    let generic = run(variants()[0], Staleness::BSP, &program, &program);
    let virt = run(variants()[2], Staleness::BSP, &program, &program);
    assert!(
        virt == generic,
        "virtual mode's tables differ from generic's"
    );
}

/// Three runs of 2 workers with `shards` shards in their process, each run `clocks`
/// CLOCKs of a READ (if `reads`) and an UPDATE of each of 8192 rows of 16 floats, worker 1
/// clocking 10 ms after worker 0. The table's rows, and `Stats::helped_drains`.
fn late_clock_runs(shards: usize, clocks: usize, reads: bool) -> (Vec<(u64, Vec<f32>)>, u64) {
    within(60, move || {
        let config = Config::new(2).with_shards(shards).with_mode(Mode::Virtual);
        let mut cluster = Cluster::start(config).unwrap();
        let t = cluster.create_table::<f32>("t", 16).unwrap();
        let body = |w: &mut Worker<'_>, slow: bool| -> iterstore::Result<()> {
            for _ in 0..clocks {
                for r in 0..8192u64 {
                    let mut row = [0.0f32; 16];
                    if reads {
                        w.read(&t, r, &mut row)?;
                    }
                    let delta: [f32; 16] =
                        std::array::from_fn(|j| row[j] * 0.5 + (r + j as u64) as f32 / 3.0);
                    w.update(&t, r, &delta)?;
                }
                if slow && w.id() == 1 {
                    std::thread::sleep(Duration::from_millis(10));
                }
                w.clock()?;
            }
            Ok(())
        };
        cluster.virtual_iteration(|w| body(w, false)).unwrap();
        // Whether a waiting worker gets to a shard before the CLOCK's worker drives it is
        // up to the scheduler: on a loaded machine a few runs can all go the CLOCK's way,
        // so there are enough runs for help to show (each ~15 ms).
        for _ in 0..12 {
            cluster.run(|w| body(w, true)).unwrap();
        }
        let helped = cluster.stats().helped_drains;
        let rows = cluster.snapshot(&t).unwrap();
        cluster.shutdown().unwrap();
        (rows, helped)
    })
}

/// `late_clock_runs` with one shard and with two give the same bits; with two, worker 0
/// took a shard's share of worker 1's CLOCK on its own thread if `helps`.
fn assert_late_clocks_helped(clocks: usize, reads: bool, helps: bool) {
    let (one, helped_one) = late_clock_runs(1, clocks, reads);
    let (two, helped_two) = late_clock_runs(2, clocks, reads);
    // One shard: the CLOCK's worker drives it. A waiting reader can still take the CLOCK
    // in the instant between its enqueue and its sender's drive (CI saw it once, loaded),
    // so a couple of such takes in 12 runs are races, not help.
    assert!(
        helped_one <= 2,
        "one shard: the CLOCK's worker drives it ({helped_one})"
    );
    assert_eq!(helped_two > 0, helps, "helped {helped_two} times");
    assert_eq!(one.len(), two.len());
    for ((k1, a), (k2, b)) in one.iter().zip(&two) {
        assert_eq!(k1, k2);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a), bits(b), "row {k1}");
    }
}

/// With several shards in a process, a worker waiting for the refresh another worker's
/// CLOCK released takes a shard's share of that work on its own thread
/// (`Stats::helped_drains`), and the values come out the same bits as with one shard.
#[test]
fn waiting_workers_take_the_work_a_clock_releases_on_other_shards() {
    assert_late_clocks_helped(4, true, true);
}

/// A run's last CLOCK has no reader waiting on it (a PageRank iteration is one run of one
/// clock): a worker done with its part stays to take a shard's share of the last
/// worker's CLOCK (here nothing is read, so only that can count as help), unless the
/// workers outnumber the CPUs.
#[test]
fn a_worker_done_with_a_run_takes_a_share_of_the_last_clock() {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    assert_late_clocks_helped(1, false, cpus >= 2);
}

/// Per worker, clocks of `read_update`s of every table (alone, with another row and of
/// one row twice) between plain reads and updates of the same rows, so held rows are
/// read, updated and held again in every mode.
fn read_update_program() -> Program {
    let clock: Vec<Op> = (0u8..TABLES)
        .flat_map(|t| {
            [
                Op::Read(t, 0),
                Op::ReadUpdate(t, 1, 1),
                Op::Update(t, 1),
                Op::UpdateCol(t, 2, 3),
                Op::Read(t, 1),
                Op::Read(t, 2),
                Op::ReadUpdate(t, 1, 0),
                Op::ReadUpdate(t, 2, 2),
                Op::Read(t, 2),
                Op::Update(t, 2),
                Op::ReadUpdate(t, 2, 1),
                // Updated, its view fresh, then held: the copy starts with the update.
                Op::Update(t, 4),
                Op::Read(t, 4),
                Op::ReadUpdate(t, 4, 0),
                Op::Read(t, 4),
            ]
        })
        .collect();
    vec![vec![clock.clone(), clock]; 2]
}

#[test]
fn read_update_holds_rows_alike_in_every_mode() {
    let program = read_update_program();
    assert_same_everywhere(&program, &program).unwrap();
    assert_same_everywhere(&program, &deviate(&program)).unwrap();
    // The specialized store lends rows with blocks once their views are fresh (a
    // clock's first read of a row refreshes its chunk: here plain reads of every row
    // first); a run's rows (tables `n`, `m`) take the general path, counted as copied.
    // Without views it copies them all.
    let wide_op = |op: &Op| match *op {
        // Table `f` pairs with `n` (runs) but when alone.
        Op::ReadUpdate(t, _, k) => t == 1 || t == 2 || (t == 0 && k == 0),
        Op::Read(t, _) | Op::Update(t, _) | Op::UpdateCol(t, _, _) => t < 3,
    };
    let fresh = (0u8..3).flat_map(|t| (0..4).map(move |r| Op::Read(t, r)));
    let wide_clock: Vec<Op> = fresh
        .chain(program[0][0].iter().copied().filter(wide_op))
        .collect();
    let wide: Program = vec![vec![wide_clock.clone(), wide_clock]; 2];
    let lent = virtual_stats(&wide);
    assert!(lent.lent_read_updates > 0, "{lent:?}");
    assert_eq!(lent.copied_read_updates, 0, "{lent:?}");
    let runs = virtual_stats(&program);
    assert!(runs.copied_read_updates > 0, "{runs:?}");
    let mut no_views = Specializations::ALL;
    no_views.thread_caches = false;
    let copied = stats_of(&program, &program, Mode::Virtual, no_views, None);
    assert_eq!(copied.lent_read_updates, 0, "{copied:?}");
    assert_eq!(
        copied.copied_read_updates,
        runs.lent_read_updates + runs.copied_read_updates,
        "{copied:?}"
    );
    let generic = stats_of(
        &program,
        &program,
        Mode::Generic,
        Specializations::ALL,
        None,
    );
    assert_eq!(
        (generic.lent_read_updates, generic.copied_read_updates),
        (0, 0),
        "generic workers are not specialized: {generic:?}"
    );
}

#[test]
fn a_held_row_adds_each_update_to_the_worker_s_copy() {
    // 1 + 1e-16 rounds to 1 (half an ulp of 1 is 1.1e-16) but 1 + 2e-16 does not: a held
    // row, to which each update is added, reads 1 after two such updates; a row that
    // is not held reads its snapshot plus the summed updates.
    let mut no_views = Specializations::ALL;
    no_views.thread_caches = false;
    let configs = [
        (Mode::Generic, Specializations::ALL),
        (Mode::Virtual, Specializations::ALL),
        (Mode::Virtual, no_views),
    ];
    for (mode, specs) in configs {
        let got = within(30, move || {
            let config = Config::new(1).with_mode(mode).with_specializations(specs);
            let mut cluster = Cluster::start(config).unwrap();
            let t = cluster.create_table::<f64>("t", 1).unwrap();
            cluster
                .init_run(|w| {
                    w.update(&t, 0, &[1.0])?;
                    w.update(&t, 1, &[1.0])?;
                    w.clock()
                })
                .unwrap();
            let iteration = |w: &mut Worker<'_>| {
                let mut d = [0.0];
                // Row 0 is held, then updated twice more; row 1 only read and updated.
                w.read_update([(&t, 0)], [&mut d], |_, [d]| d[0] = 0.0)?;
                w.update(&t, 0, &[1e-16])?;
                w.update(&t, 0, &[1e-16])?;
                let mut held = [0.0];
                w.read(&t, 0, &mut held)?;
                let lent = w.read_with(&t, 0, |row| row[0])?;
                let mut plain = [0.0];
                w.read(&t, 1, &mut plain)?;
                w.update(&t, 1, &[1e-16])?;
                w.update(&t, 1, &[1e-16])?;
                w.read(&t, 1, &mut plain)?;
                w.clock()?;
                Ok((held[0], lent, plain[0]))
            };
            if mode == Mode::Virtual {
                cluster.virtual_iteration(iteration).unwrap();
            }
            let first = cluster.run(iteration).unwrap();
            // The next clock reads the summed updates from the servers, in every mode.
            let mut after = [0.0];
            let next = cluster.run(|w| w.read(&t, 0, &mut after.clone()).map(|_| ()));
            next.unwrap();
            let snap = cluster.snapshot(&t).unwrap();
            after[0] = snap.iter().find(|(r, _)| *r == 0).unwrap().1[0];
            (first[0], after[0])
        });
        let ((held, lent, plain), stored) = got;
        assert_eq!(held, 1.0, "{mode:?} {specs:?}");
        assert_eq!(lent, 1.0, "{mode:?} {specs:?}");
        assert_eq!(plain, 1.0 + 2e-16, "{mode:?} {specs:?}");
        assert_eq!(stored, 1.0 + 2e-16, "{mode:?} {specs:?}: the log sums them");
    }
}

#[test]
fn held_rows_keep_every_update_under_ssp_across_clocks_and_refills() {
    // One worker holds one of two rows of a chunk each clock and updates the other: a
    // row stays held while its view serves reads (across clocks, under SSP) and a refill
    // of its chunk releases it, the view a snapshot again. Every read is the exact count
    // of the worker's updates of the row, whichever way it is held or released.
    for staleness in [
        Staleness::Bounded(1),
        Staleness::Bounded(2),
        Staleness::Unbounded,
    ] {
        for variant in variants() {
            let name = variant.name;
            let mut config = Config::new(1)
                .with_shards(1)
                .with_mode(variant.mode)
                .with_specializations(variant.specs)
                .with_staleness(staleness);
            config.prefetch_chunks = 1; // both rows (of 3 floats: not a run) in one chunk
            let bad = ssp_failures(config, 2, move |w, t, counted| {
                let mut bad = Vec::new();
                let mut check = |what: &str, got: f32, want: u64| {
                    if counted && got != want as f32 {
                        bad.push(format!("{what}: {got}, want {want}"));
                    }
                };
                for clock in 0..4u64 {
                    let (held, other) = (clock % 2, 1 - clock % 2);
                    let done = w.current_clock();
                    let mut d = [0.0f32; 3];
                    let mut seen = 0.0;
                    w.read_update([(t, held)], [&mut d], |[r], [d]| {
                        seen = r[0];
                        d.fill(1.0);
                    })?;
                    check("held before", seen, done);
                    let mut row = [0.0f32; 3];
                    w.read(t, other, &mut row)?;
                    check("other", row[0], done);
                    w.read(t, held, &mut row)?;
                    check("held after its update", row[0], done + 1);
                    w.update(t, other, &[1.0; 3])?;
                    w.clock()?;
                }
                Ok(bad)
            });
            assert!(bad.is_empty(), "{name} {staleness:?}: {bad:?}");
        }
    }
}

/// Runs `step` on every worker of a cluster of `config` with a table `t` of 3 floats: once
/// through a virtual iteration in virtual mode (`counted` false: reads of zeros), then
/// `runs` runs; returns the failures the runs reported.
fn ssp_failures<F>(config: Config, runs: usize, step: F) -> Vec<String>
where
    F: Fn(&mut Worker<'_>, &Table<f32>, bool) -> iterstore::Result<Vec<String>>
        + Send
        + Sync
        + 'static,
{
    within(30, move || {
        let mode = config.mode;
        let mut cluster = Cluster::start(config).unwrap();
        let t: Table<f32> = cluster.create_table("t", 3).unwrap();
        if mode == Mode::Virtual {
            let gather = |w: &mut Worker<'_>| step(w, &t, false).map(drop);
            cluster.virtual_iteration(gather).unwrap();
        }
        let mut bad = Vec::new();
        for _ in 0..runs {
            bad.extend(cluster.run(|w| step(w, &t, true)).unwrap().concat());
        }
        cluster.shutdown().unwrap();
        bad
    })
}
