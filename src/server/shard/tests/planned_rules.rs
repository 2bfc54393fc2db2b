//! Planned rows of a table with an update rule: a slab's deltas of them, whole or sparse,
//! beside rows of the same clock sent the generic way, are folded into the rows'
//! gradients and stepped exactly as the same gradients sent the generic way — in every
//! interleaving of two processes' messages, once per complete clock (BSP) or once per
//! push as it arrives (asynchronous), with the arena refreshes showing the stepped rows.

use super::*;
use crate::rule::Rule;

const ADAM: Rule = Rule::Adam {
    lr: 0.05,
    beta1: 0.9,
    beta2: 0.99,
    eps: 1e-8,
};

/// Table 1, "w": two `f64` per row, [`ADAM`].
pub(super) fn table_w() -> TableMeta {
    TableMeta {
        id: 1,
        name: "w".into(),
        width: 2,
        elem: ElemType::F64,
        rows: None,
        rule: ADAM,
    }
}

fn w(r: u64) -> RowKey {
    RowKey::new(1, r)
}

/// Process `p`'s gradient of row `r` at clock `c`.
fn g(p: u32, c: Clock, r: u64) -> [f64; 2] {
    let x = 0.1 * f64::from(p + 1) + 0.37 * r as f64 - 0.05 * c as f64;
    [x, 0.25 - x * x]
}

/// Process `p`'s plan: its rows in its arena order, and the slots its worker updates.
fn plan(p: u32) -> (Vec<u64>, Vec<u32>) {
    match p {
        0 => (vec![0, 1, 2], vec![0, 1]),    // updates rows 0, 1
        _ => (vec![2, 1, 0, 3], vec![0, 1]), // updates rows 2, 1
    }
}

/// What process `p` (worker `p`) updates in clocks 1 and 2: per clock, its slab's rows
/// (by slot of its update layout, `None` where untouched) and the rows it sends the
/// generic way (row 4 is not planned; the others are, without a slot of its layout).
fn updates(p: u32, c: Clock) -> (Vec<Option<u64>>, Vec<u64>) {
    match (p, c) {
        (0, 1) => (vec![Some(0), Some(1)], vec![2, 4]),
        (0, _) => (vec![None, Some(1)], vec![4]),
        (_, 1) => (vec![None, Some(1)], vec![0]),
        (_, _) => (vec![Some(2), Some(1)], vec![]),
    }
}

/// Process `p`'s messages: its plan (if `planned`), then per clock its updates — slabs
/// (whole in clock 1, sparse in clock 2) if `planned`, else every row the generic way —
/// and a refresh of its whole arena, then its finish.
pub(super) fn script(p: u32, planned: bool) -> Vec<ToShard> {
    let (keys, slots) = plan(p);
    let mut msgs = Vec::new();
    if planned {
        msgs.push(ToShard::Specialize {
            from: p,
            epoch: 1,
            keys: keys.iter().map(|&r| w(r)).collect(),
            chunk_ends: vec![keys.len() as u32],
            chunk_phases: vec![u64::MAX],
            updaters: vec![(p, slots)],
        });
    }
    for c in 1..=2 {
        let (slab_rows, generic) = updates(p, c);
        let mut rows: Vec<(RowKey, AlignedBuf)> = generic
            .iter()
            .map(|&r| (w(r), AlignedBuf::from_slice(&g(p, c, r))))
            .collect();
        let (mut slab, mut positions) = (Vec::new(), Vec::new());
        for (i, r) in slab_rows.iter().enumerate() {
            match (r, planned) {
                (Some(r), true) => {
                    slab.extend(g(p, c, *r));
                    positions.push(i as u32);
                }
                (Some(r), false) => rows.push((w(*r), AlignedBuf::from_slice(&g(p, c, *r)))),
                // Untouched: zeros in a whole slab, absent from a sparse one.
                (None, true) if c == 1 => slab.extend([0.0; 2]),
                (None, _) => {}
            }
        }
        let sparse = planned && c == 2;
        msgs.push(ToShard::Clock {
            worker: p,
            clock: c,
            epoch: if planned { 1 } else { 0 },
            rows,
            outer: Vec::new(),
            slab: AlignedBuf::from_slice(&slab),
            slab_rows: sparse.then_some(positions),
        });
    }
    if planned {
        msgs.push(ToShard::SlabFetch {
            from: p,
            epoch: 1,
            required: 2,
            want: WantedChunks::All,
        });
    }
    msgs.push(ToShard::Finish { worker: p });
    msgs
}

/// A shard of two processes with "w", stepping pushes as they arrive if `on_arrival`.
fn shard(on_arrival: bool) -> Shard {
    let mut s = shard_in(0, two_process_world()).stepping_on_arrival(on_arrival);
    s.step(ToShard::CreateTable { meta: table_w() }, &mut Vec::new());
    s
}

/// The shard after `order` (process of each message, in turn) of the two scripts.
fn after(order: &[u32], planned: bool, on_arrival: bool) -> (Shard, Vec<Envelope>) {
    let mut scripts = [script(0, planned), script(1, planned)].map(Vec::into_iter);
    let mut s = shard(on_arrival);
    let mut out = Vec::new();
    for &p in order {
        let msg = scripts[p as usize].next().expect("a message left");
        s.step(msg, &mut out);
    }
    assert!(rejected(&out).is_empty(), "{out:?}");
    (s, out)
}

/// Every row of "w" the shard holds, by row, with its rule state's step count.
fn rows_of_w(s: &mut Shard) -> Vec<(u64, Vec<f64>, u64)> {
    let mut out = Vec::new();
    s.step(
        ToShard::Dump {
            from: 0,
            table: 1,
            backup: None,
        },
        &mut out,
    );
    let mut rows: Vec<(u64, Vec<f64>, u64)> = to_clients(&out)
        .flat_map(|(_, m)| match m {
            ToClient::DumpRows { rows, .. } => rows.clone(),
            _ => Vec::new(),
        })
        .map(|(k, b)| {
            (
                k.row,
                b.cast::<f64>().to_vec(),
                s.rules.get(k).map_or(0, |r| r.0),
            )
        })
        .collect();
    rows.sort_by_key(|r| r.0);
    rows
}

/// The orders of the two scripts' messages a FIFO transport allows.
fn orders(planned: bool) -> Vec<Vec<u32>> {
    let of = |p: u32| vec![p; script(p, planned).len()];
    interleavings(&of(0), &of(1))
}

#[test]
fn planned_rule_rows_step_as_the_same_gradients_sent_the_generic_way_in_every_order() {
    let generic_order: Vec<u32> = orders(false).swap_remove(0);
    let (mut generic, _) = after(&generic_order, false, false);
    let want = rows_of_w(&mut generic);
    // Row 0: clock 1 only (clock 2's whole-slab zeros are no gradient); rows 1 and 2:
    // both clocks; row 4 (generic): both; row 3 (planned, never updated): none.
    let steps: Vec<(u64, u64)> = want.iter().map(|r| (r.0, r.2)).collect();
    assert_eq!(steps, [(0, 1), (1, 2), (2, 2), (4, 2)]);
    for order in orders(true) {
        let (mut s, out) = after(&order, true, false);
        let mut got = rows_of_w(&mut s);
        assert_eq!(got.iter().find(|r| r.0 == 3).map(|r| r.2), Some(0));
        got.retain(|r| r.0 != 3);
        assert_eq!(got, want, "{order:?}");
        // Each process's refresh at clock 2 is its chunk, stepped, in its own order.
        for p in 0..2 {
            let refresh: Vec<f64> = to_clients(&out)
                .filter(|(to, _)| *to == p)
                .find_map(|(_, m)| match m {
                    ToClient::SlabRows { bytes, .. } => Some(bytes.cast::<f64>().to_vec()),
                    _ => None,
                })
                .expect("a refresh");
            let value = |r: u64| {
                want.iter()
                    .find(|w| w.0 == r)
                    .map_or(vec![0.0; 2], |w| w.1.clone())
            };
            let expected: Vec<f64> = plan(p).0.into_iter().flat_map(value).collect();
            assert_eq!(refresh, expected, "process {p} {order:?}");
        }
    }
}

#[test]
fn asynchronous_shards_step_a_planned_push_on_arrival_as_a_generic_one() {
    for order in orders(false) {
        // Both plans first, then the same messages in the same order, each process's
        // refresh just before its finish (its third message without a plan).
        let mut planned_order = vec![0, 1];
        let mut sent = [0; 2];
        for &p in &order {
            sent[p as usize] += 1;
            let refresh = sent[p as usize] == 3;
            planned_order.extend(std::iter::repeat_n(p, 1 + usize::from(refresh)));
        }
        let (mut s, _) = after(&planned_order, true, true);
        let (mut reference, _) = after(&order, false, true);
        let mut got = rows_of_w(&mut s);
        got.retain(|r| r.0 != 3);
        assert_eq!(got, rows_of_w(&mut reference), "{order:?}");
    }
}
