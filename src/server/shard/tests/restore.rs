//! Restore: rows back from a checkpoint, in every order, and out of place.

use super::*;

/// What process `p` sends in a resume of a two-process cluster: its rows for shard 0
/// (process 0 in two messages), then after `Restored` a read and `Leave`.
fn restore_script(p: u32) -> (Vec<ToShard>, Vec<ToShard>) {
    let meta = table_t();
    let row = |r: u64| (RowKey::new(0, r), AlignedBuf::from_slice(&[r as i64, -1]));
    let restore = |rows, last| ToShard::Restore {
        from: p,
        clock: 6,
        rows,
        states: vec![],
        last,
    };
    let mut before = vec![ToShard::CreateTable { meta }];
    if p == 0 {
        before.push(restore(vec![row(1), row(3)], false));
        before.push(restore(vec![row(5)], true));
    } else {
        before.push(restore(vec![row(2)], true));
    }
    let after = vec![
        ToShard::Fetch {
            from: p,
            rows: (1..=6).map(|r| (RowKey::new(0, r), 6)).collect(),
        },
        ToShard::Leave { from: p },
    ];
    (before, after)
}

#[test]
fn a_restore_completes_once_under_every_order_the_transport_allows() {
    let (b0, a0) = restore_script(0);
    let (b1, a1) = restore_script(1);
    let mut orders = 0;
    for before in interleavings(&b0, &b1) {
        for after in interleavings(&a0, &a1) {
            orders += 1;
            let mut s = Shard::new(0, two_process_world());
            let mut out = Vec::new();
            let last = before.len() - 1;
            for (i, m) in before.iter().enumerate() {
                s.step(m.clone(), &mut out);
                let restored = out
                    .iter()
                    .filter(|m| matches!(m, Envelope::Client(_, ToClient::Restored { shard: 0 })))
                    .count();
                let last_restore = before[i + 1..]
                    .iter()
                    .all(|m| !matches!(m, ToShard::Restore { .. }));
                assert_eq!(restored, if last_restore { 2 } else { 0 }, "{i} of {last}");
            }
            for m in &after {
                s.step(m.clone(), &mut out);
            }
            assert!(s.released());
            for p in 0..2 {
                let answers = answers_to(p, &out);
                assert!(
                    answers.contains(
                        &"rows@6 [(1, [1, -1]), (2, [2, -1]), (3, [3, -1]), (4, [0, 0]), \
                          (5, [5, -1]), (6, [0, 0])]"
                            .to_string()
                    ),
                    "{answers:?}"
                );
            }
        }
    }
    assert_eq!(orders, 10 * 6);
}

#[test]
fn a_restore_out_of_place_fails_the_cluster() {
    let refused = |prefix: Vec<ToShard>| {
        let mut s = shard_in(0, two_process_world());
        let mut out = Vec::new();
        for m in prefix {
            s.step(m, &mut out);
        }
        rejected(&out).first().map(|r| r.to_string())
    };
    let restore = |from, clock, rows: Vec<(RowKey, AlignedBuf)>, last| ToShard::Restore {
        from,
        clock,
        rows,
        states: vec![],
        last,
    };
    let row = |t, bytes: &[i64]| (RowKey::new(t, 1), AlignedBuf::from_slice(bytes));
    let ok = vec![restore(0, 4, vec![], true), restore(1, 4, vec![], true)];
    assert_eq!(refused(ok.clone()), None);
    let twice = [ok.clone(), vec![restore(0, 4, vec![], true)]].concat();
    assert!(refused(twice).unwrap().contains("another resume"));
    let after_run = vec![clock(0, 1, &[]), restore(0, 4, vec![], true)];
    assert!(refused(after_run).unwrap().contains("after runs"));
    let clocks = vec![restore(0, 4, vec![], false), restore(1, 5, vec![], true)];
    assert!(refused(clocks).unwrap().contains("another from clock 4"));
    let after_last = vec![restore(0, 4, vec![], true), restore(0, 4, vec![], true)];
    assert!(refused(after_last).unwrap().contains("after its last"));
    let unknown = vec![restore(0, 4, vec![row(3, &[1, 1])], true)];
    assert!(refused(unknown).unwrap().contains("unknown table #3"));
    let narrow = vec![restore(0, 4, vec![row(0, &[1])], true)];
    assert!(refused(narrow)
        .unwrap()
        .contains("has 8 bytes, expected 16"));
    let dup = vec![
        restore(0, 4, vec![row(0, &[1, 1])], false),
        restore(0, 4, vec![row(0, &[1, 1])], true),
    ];
    assert!(refused(dup).unwrap().contains("restored twice"));
    let gone = vec![restore(0, 4, vec![], true), ToShard::Leave { from: 1 }];
    assert!(refused(gone)
        .unwrap()
        .contains("process 1 left the cluster during a resume"));
    let gone_after = [ok, vec![ToShard::Leave { from: 1 }]].concat();
    assert_eq!(refused(gone_after), None);
}
