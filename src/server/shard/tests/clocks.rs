//! Clocks and reads: exact snapshots, the slowest worker, the update order.

use super::*;

#[test]
fn reads_wait_for_the_slowest_worker_and_see_exact_snapshots() {
    let mut s = shard_with_table(2);
    let mut out = Vec::new();
    s.step(clock(0, 1, &[(3, [1, 2])]), &mut out);
    // Worker 0 runs ahead: its clock-1 update must not be visible at data clock 1.
    s.step(clock(0, 2, &[(3, [10, 10])]), &mut out);
    s.step(fetch(3, 1), &mut out);
    assert!(
        rows_of(&out).is_empty(),
        "worker 1 has not finished clock 0"
    );
    s.step(clock(1, 1, &[(3, [100, 0])]), &mut out);
    assert_eq!(rows_of(&out), vec![(3, vec![101, 2], 1)]);
    out.clear();
    s.step(fetch(3, 0), &mut out);
    assert_eq!(rows_of(&out), vec![(3, vec![101, 2], 1)]);
}

#[test]
fn bad_updates_change_nothing_but_still_count_the_clock() {
    let mut s = shard_with_table(1);
    let mut out = Vec::new();
    let bad = ToShard::Clock {
        worker: 0,
        clock: 1,
        epoch: 0,
        rows: vec![
            (RowKey::new(0, 1), AlignedBuf::from_slice(&[1i64, 1])),
            (RowKey::new(0, 2), AlignedBuf::from_slice(&[1i64])),
        ],
        outer: Vec::new(),
        slab: AlignedBuf::default(),
        slab_rows: None,
    };
    s.step(bad, &mut out);
    assert!(matches!(
        out[0],
        Envelope::Client(_, ToClient::Rejected { .. })
    ));
    out.clear();
    s.step(fetch(1, 1), &mut out);
    assert_eq!(rows_of(&out), vec![(1, vec![0, 0], 1)]);
    out.clear();
    s.step(
        ToShard::Fetch {
            from: 0,
            rows: vec![(RowKey::new(9, 0), 0)],
        },
        &mut out,
    );
    assert!(matches!(
        out[0],
        Envelope::Client(_, ToClient::Rejected { .. })
    ));
}

#[test]
fn finished_workers_are_not_waited_for() {
    let mut s = shard_with_table(2);
    let mut out = Vec::new();
    s.step(clock(0, 1, &[]), &mut out);
    s.step(clock(0, 2, &[]), &mut out);
    s.step(fetch(0, 2), &mut out);
    assert!(rows_of(&out).is_empty());
    s.step(ToShard::Finish { worker: 1 }, &mut out);
    assert_eq!(rows_of(&out).len(), 1);
}

#[test]
fn updates_apply_in_worker_order_within_a_clock() {
    // Floating-point addition is not associative: the shard must fix the order.
    let mut s = Shard::new(0, World::single(2, 1));
    let meta = TableMeta {
        id: 0,
        name: "f".into(),
        width: 1,
        elem: ElemType::F64,
        rows: None,
        rule: crate::rule::Rule::Sum,
    };
    s.step(ToShard::CreateTable { meta }, &mut Vec::new());
    let big = |w: WorkerId, v: f64| ToShard::Clock {
        worker: w,
        clock: 1,
        epoch: 0,
        rows: vec![(RowKey::new(0, 0), AlignedBuf::from_slice(&[v]))],
        outer: Vec::new(),
        slab: AlignedBuf::default(),
        slab_rows: None,
    };
    let mut out = Vec::new();
    s.step(big(1, -1e16), &mut out);
    s.step(big(0, 1e16), &mut out);
    s.step(
        ToShard::Fetch {
            from: 0,
            rows: vec![(RowKey::new(0, 0), 1)],
        },
        &mut out,
    );
    let Some(Envelope::Client(_, ToClient::Rows { rows, .. })) = out.last() else {
        panic!("{out:?}")
    };
    assert_eq!(rows[0].1.cast::<f64>(), &[0.0]);
}
