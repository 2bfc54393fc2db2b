//! The shard's tests, by concern: each file drives a [`Shard`] with messages and checks
//! its answers, with no IO: a message is handled as [`Step`] says, and the checkpoint
//! tests hand the shard the outcome of a write themselves. (The driver's writing of a
//! checkpoint part is tested in `server`'s tests, with these helpers.) The helpers here
//! build shards, tables and the scripts of a two-process cluster.

mod branches;
mod checkpoint;
mod clocks;
mod custom_rules;
mod functions;
mod migration;
mod outer;
mod planned_rules;
mod replicas;
mod restore;
mod rows;
mod rule_state;
mod rules;
mod runs;
mod set;
mod undo;

use super::*;
pub(super) use crate::element::ElemType;
use crate::rows_part;
pub(super) use std::sync::Arc;

/// A message handled by the state machine alone, which asks for no IO: only a
/// checkpoint does, and its tests call [`Shard::handle`] themselves.
trait Step {
    fn step(&mut self, msg: ToShard, out: &mut Vec<Envelope>);
}

impl Step for Shard {
    fn step(&mut self, msg: ToShard, out: &mut Vec<Envelope>) {
        let write = self.handle(msg, out);
        assert!(write.is_none(), "only a checkpoint asks for IO: {write:?}");
    }
}

pub(in crate::server) fn shard_with_table(workers: usize) -> Shard {
    shard_in(0, World::single(workers, 1))
}

/// Table 0, "t": two `i64` per row.
fn table_t() -> TableMeta {
    TableMeta {
        id: 0,
        name: "t".into(),
        width: 2,
        elem: ElemType::I64,
        rows: None,
        rule: crate::rule::Rule::Sum,
    }
}

/// Shard `id` of `world`, with [`table_t`] created.
pub(in crate::server) fn shard_in(id: ShardId, world: World) -> Shard {
    let mut s = Shard::new(id, world);
    s.step(ToShard::CreateTable { meta: table_t() }, &mut Vec::new());
    s
}

/// The messages `out` holds for processes, with the process each is for.
pub(in crate::server) fn to_clients(
    out: &[Envelope],
) -> impl Iterator<Item = (ProcessId, &ToClient)> {
    out.iter().filter_map(|e| match e {
        Envelope::Client(p, m) => Some((*p, m)),
        Envelope::Shard(..) => None,
    })
}

fn rows_of(out: &[Envelope]) -> Vec<(u64, Vec<i64>, u64)> {
    to_clients(out)
        .filter_map(|(_, m)| match m {
            ToClient::Rows {
                data_clock, rows, ..
            } => Some(
                rows.iter()
                    .map(|(k, b)| (k.row, b.cast::<i64>().to_vec(), *data_clock))
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect()
}

pub(in crate::server) fn clock(
    worker: WorkerId,
    clock: Clock,
    rows: &[(u64, [i64; 2])],
) -> ToShard {
    ToShard::Clock {
        worker,
        clock,
        epoch: 0,
        rows: rows
            .iter()
            .map(|(r, v)| (RowKey::new(0, *r), AlignedBuf::from_slice(v)))
            .collect(),
        outer: Vec::new(),
        slab: AlignedBuf::default(),
        slab_rows: None,
    }
}

fn fetch(row: u64, required: Clock) -> ToShard {
    ToShard::Fetch {
        from: 0,
        rows: vec![(RowKey::new(0, row), required)],
    }
}

/// Every way to merge `a` and `b` keeping each one's order (what a transport that is
/// FIFO per sender allows).
pub(in crate::server) fn interleavings<T: Clone>(a: &[T], b: &[T]) -> Vec<Vec<T>> {
    match (a.split_first(), b.split_first()) {
        (None, _) => vec![b.to_vec()],
        (_, None) => vec![a.to_vec()],
        (Some((x, ra)), Some((y, rb))) => {
            let mut out = Vec::new();
            for mut rest in interleavings(ra, b) {
                rest.insert(0, x.clone());
                out.push(rest);
            }
            for mut rest in interleavings(a, rb) {
                rest.insert(0, y.clone());
                out.push(rest);
            }
            out
        }
    }
}

/// What process `p` (one worker, global id `p`) sends in one run of a two-process
/// cluster, until it waits at the run barrier; then what it sends after the barrier.
fn process_script(p: u32) -> (Vec<ToShard>, Vec<ToShard>) {
    let meta = table_t();
    let key = |r: u64| RowKey::new(0, r);
    // The processes order the shared rows differently and each has a row of its own.
    let keys = if p == 0 {
        vec![key(1), key(2), key(10)]
    } else {
        vec![key(11), key(2), key(1)]
    };
    let delta = |v: i64| [v, -v];
    let slab: Vec<i64> = if p == 0 {
        [delta(1), delta(2)].concat() // slots 0, 1: rows 1, 2
    } else {
        [delta(30), delta(40)].concat() // slots 1, 2: rows 2, 1
    };
    let before = vec![
        ToShard::CreateTable { meta },
        ToShard::Specialize {
            from: p,
            epoch: 1,
            keys,
            chunk_ends: vec![1, 3],
            chunk_phases: vec![u64::MAX; 2],
            updaters: vec![(p, if p == 0 { vec![0, 1] } else { vec![1, 2] })],
        },
        ToShard::Clock {
            worker: p,
            clock: 1,
            epoch: 1,
            rows: vec![(key(5), AlignedBuf::from_slice(&[100 + i64::from(p), 1]))],
            outer: Vec::new(),
            slab: AlignedBuf::from_slice(&slab),
            slab_rows: None,
        },
        ToShard::SlabFetch {
            from: p,
            epoch: 1,
            required: 1,
            want: WantedChunks::All,
        },
        ToShard::Finish { worker: p },
        ToShard::RunEnd { from: p, run: 1 },
    ];
    let after = vec![
        ToShard::Fetch {
            from: p,
            rows: vec![(key(5), 1), (key(2), 1)],
        },
        ToShard::Leave { from: p },
    ];
    (before, after)
}

/// The answers process `p` got, in a form independent of arrival order.
fn answers_to(p: u32, out: &[Envelope]) -> Vec<String> {
    let mut v: Vec<String> = to_clients(out)
        .filter(|(to, _)| *to == p)
        .filter_map(|(_, m)| match m {
            ToClient::Rejected { reason, .. } => panic!("rejected: {reason}"),
            ToClient::MinClock { .. } => None,
            ToClient::Rows {
                rows, data_clock, ..
            } => Some(format!(
                "rows@{data_clock} {:?}",
                rows.iter()
                    .map(|(k, b)| (k.row, b.cast::<i64>().to_vec()))
                    .collect::<Vec<_>>()
            )),
            ToClient::SlabRows {
                chunk,
                data_clock,
                bytes,
                epoch,
                ..
            } => Some(format!(
                "slab {epoch}/{chunk}@{data_clock} {:?}",
                bytes.cast::<i64>()
            )),
            other => Some(format!("{other:?}")),
        })
        .collect();
    v.sort();
    v
}

pub(in crate::server) fn two_process_world() -> World {
    World {
        processes: 2,
        workers: 1,
        shards: 1,
    }
}

pub(in crate::server) fn rejected(out: &[Envelope]) -> Vec<&str> {
    to_clients(out)
        .filter_map(|(_, m)| match m {
            ToClient::Rejected { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .collect()
}

/// Shard 0 of one process with one worker, between runs at clock 2: rows 4 and 2 sent
/// the generic way, rows 3 and 9 planned (9 is never updated).
pub(in crate::server) fn shard_between_runs() -> Shard {
    let mut s = shard_with_table(1);
    let mut out = Vec::new();
    s.step(clock(0, 1, &[(4, [1, 2]), (2, [3, 4])]), &mut out);
    let specialize = ToShard::Specialize {
        from: 0,
        epoch: 1,
        keys: vec![RowKey::new(0, 3), RowKey::new(0, 9)],
        chunk_ends: vec![2],
        chunk_phases: vec![1],
        updaters: vec![(0, vec![0])],
    };
    s.step(specialize, &mut out);
    let slab = ToShard::Clock {
        worker: 0,
        clock: 2,
        epoch: 1,
        rows: vec![],
        outer: Vec::new(),
        slab: AlignedBuf::from_slice(&[5i64, 6]),
        slab_rows: None,
    };
    s.step(slab, &mut out);
    s.step(ToShard::Finish { worker: 0 }, &mut out);
    s.step(ToShard::RunEnd { from: 0, run: 1 }, &mut out);
    assert!(rejected(&out).is_empty(), "{out:?}");
    s
}

/// The rows of an encoded rows part, as `(row, values)` of table 0 (`i64` pairs), and its
/// header.
pub(in crate::server) fn decode_part(bytes: &[u8]) -> (rows_part::Header, Vec<(u64, Vec<i64>)>) {
    let mut rows = Vec::new();
    let header = rows_part::read(
        bytes,
        |t| (t == 0).then_some((16, None)),
        |item| {
            if let rows_part::Item::Row(k, b) = item {
                rows.push((k.row, b.cast::<i64>().to_vec()));
            }
        },
    )
    .unwrap();
    (header, rows)
}
