//! Migration: rows handed over and adopted in every order.

use super::*;
use crate::placement::Placement;

/// Shard 1 of 3 (one per process, one worker each) holding rows 0..8 of table 0.
fn seeded_middle_shard() -> Shard {
    let world = World {
        processes: 3,
        workers: 1,
        shards: 1,
    };
    let mut s = shard_in(1, world);
    let mut out = Vec::new();
    let rows: Vec<(u64, [i64; 2])> = (0..8).map(|r| (r, [r as i64, 1])).collect();
    s.step(clock(0, 1, &rows), &mut out);
    s.step(clock(1, 1, &[]), &mut out);
    s.step(clock(2, 1, &[]), &mut out);
    assert!(s.pending.is_empty(), "{out:?}");
    s
}

#[test]
fn a_migration_completes_under_every_order_of_its_messages_and_loses_nothing() {
    let key = |r| RowKey::new(0, r);
    // Rows 100 and 200 come from shards 0 and 2: the same placement sends them here.
    let overrides = vec![
        (key(0), 0),
        (key(1), 2),
        (key(2), 1),
        (key(100), 1),
        (key(200), 1),
    ];
    let mut placement = Placement::hashed(3);
    for &(k, s) in &overrides {
        placement.set(k, s);
    }
    let adopt = |from: ShardId, row: u64| ToShard::Adopt {
        shard: from,
        rows: vec![(key(row), AlignedBuf::from_slice(&[row as i64, 7]))],
        states: vec![],
    };
    let script = [
        ToShard::Migrate {
            from: 1,
            overrides: overrides.clone(),
        },
        adopt(0, 100),
        adopt(2, 200),
    ];
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders.map(|o| o.map(|i| script[i].clone())) {
        let mut s = seeded_middle_shard();
        let mut out = Vec::new();
        for (i, msg) in order.iter().enumerate() {
            s.step(msg.clone(), &mut out);
            let migrated = out
                .iter()
                .filter(|m| matches!(m, Envelope::Client(_, ToClient::Migrated { shard: 1 })))
                .count();
            assert_eq!(migrated, if i == 2 { 3 } else { 0 }, "{order:?}: {out:?}");
        }
        assert!(
            !out.iter()
                .any(|m| matches!(m, Envelope::Client(_, ToClient::Rejected { .. }))),
            "{out:?}"
        );
        // What left went to its new home, one Adopt per other shard.
        let mut handed: Vec<(ShardId, u64)> = Vec::new();
        for m in &out {
            if let Envelope::Shard(t, ToShard::Adopt { shard: 1, rows, .. }) = m {
                handed.extend(rows.iter().map(|(k, _)| (*t, k.row)));
            }
        }
        let adopts = out
            .iter()
            .filter(|m| matches!(m, Envelope::Shard(_, ToShard::Adopt { .. })))
            .count();
        assert_eq!(adopts, 2);
        let mut kept: Vec<u64> = s.rows.iter().map(|e| e.key().row).collect();
        kept.sort_unstable();
        for r in 0..8 {
            let home = placement.shard_of(key(r));
            if home == 1 {
                assert!(kept.contains(&r), "row {r} stays");
            } else {
                assert!(
                    handed.contains(&(home, r)),
                    "row {r} goes to {home}: {handed:?}"
                );
            }
        }
        assert!(
            handed.contains(&(0, 0)) && handed.contains(&(2, 1)),
            "{handed:?}"
        );
        assert!(kept.contains(&2) && kept.contains(&100) && kept.contains(&200));
        assert_eq!(s.rows.get(&key(100)).unwrap().cast::<i64>(), [100, 7]);
    }
}

#[test]
fn a_bad_migration_is_a_protocol_error() {
    let rejected = |msgs: Vec<ToShard>| {
        let mut s = seeded_middle_shard();
        let mut out = Vec::new();
        for m in msgs {
            s.step(m, &mut out);
        }
        out.iter()
            .any(|m| matches!(m, Envelope::Client(_, ToClient::Rejected { .. })))
    };
    let migrate = |from| ToShard::Migrate {
        from,
        overrides: vec![],
    };
    let adopt = |from| ToShard::Adopt {
        shard: from,
        rows: vec![],
        states: vec![],
    };
    assert!(!rejected(vec![migrate(1), adopt(0), adopt(2)]));
    assert!(rejected(vec![migrate(0)]), "another process's shard");
    assert!(rejected(vec![adopt(0), adopt(0)]), "adopted twice");
    assert!(rejected(vec![adopt(1)]), "from itself");
    assert!(
        rejected(vec![migrate(1), migrate(1)]),
        "migrated twice at once"
    );
    let far = ToShard::Migrate {
        from: 1,
        overrides: vec![(RowKey::new(0, 0), 3)],
    };
    assert!(rejected(vec![far]), "a shard that does not exist");
}

#[test]
fn adopted_rows_of_the_wrong_width_or_an_unknown_table_are_refused_naming_them() {
    for (rows, named) in [
        (
            vec![(RowKey::new(0, 100), AlignedBuf::from_slice(&[1i64]))],
            "8 bytes, expected 16",
        ),
        (
            vec![(RowKey::new(9, 100), AlignedBuf::from_slice(&[1i64, 2]))],
            "unknown table #9",
        ),
    ] {
        let mut s = seeded_middle_shard();
        let mut out = Vec::new();
        s.step(
            ToShard::Adopt {
                shard: 0,
                rows,
                states: vec![],
            },
            &mut out,
        );
        let why: Vec<&String> = out
            .iter()
            .filter_map(|m| match m {
                Envelope::Client(_, ToClient::Rejected { reason, .. }) => Some(reason),
                _ => None,
            })
            .collect();
        assert!(!why.is_empty() && why[0].contains(named), "{why:?}");
        assert!(
            !s.rows.contains_key(&RowKey::new(0, 100)),
            "nothing adopted"
        );
    }
}
