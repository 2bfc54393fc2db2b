//! A backup promoted once its primary's run ended serves reads and takes the next run's
//! clocks exactly as a shard that never had a backup (bit for bit, in every order of the
//! first run's messages); what cannot be promoted is refused.

use super::planned_rules::table_w;
use super::replicas::{rule_script, state};
use super::*;

/// After `order` of the two processes' scripts and the run's end, every replication
/// message delivered at once: shard 0, keeping the backup of shard 1 (two copies of each
/// shard), and shard 1 of a cluster without backups, which took the same messages.
fn keeper_and_alone(order: &[u32]) -> (Shard, Shard) {
    let world = two_process_world();
    let new = |id, replicas| {
        let mut s = Shard::new(id, world).with_replicas(replicas);
        s.step(ToShard::CreateTable { meta: table_t() }, &mut Vec::new());
        s
    };
    let (mut primary, mut keeper, mut alone) = (new(1, 2), new(0, 2), new(1, 1));
    let mut scripts = [rule_script(0), rule_script(1)].map(Vec::into_iter);
    let run_ends = (0..2).map(|from| ToShard::RunEnd { from, run: 1 });
    let msgs: Vec<ToShard> = (order.iter())
        .map(|&p| scripts[p as usize].next().expect("a message left"))
        .chain(run_ends)
        .collect();
    let mut out = Vec::new();
    for msg in msgs {
        alone.step(msg.clone(), &mut out);
        let mut in_flight = vec![(1, msg)];
        while let Some((to, m)) = in_flight.pop() {
            let mut sent = Vec::new();
            match to {
                1 => primary.step(m, &mut sent),
                _ => keeper.step(m, &mut sent),
            }
            for e in sent {
                match e {
                    Envelope::Shard(to, m) => in_flight.push((to, m)),
                    client => out.push(client),
                }
            }
        }
    }
    assert!(rejected(&out).is_empty(), "{out:?}");
    (keeper, alone)
}

fn w(r: u64) -> RowKey {
    RowKey::new(table_w().id, r)
}

/// The next run: two clocks of gradients and sums from each process, reads of every
/// row at the last clock, the finishes and the run's end.
fn next_run() -> Vec<ToShard> {
    let mut msgs = Vec::new();
    for c in 3..=4 {
        for p in 0..2u32 {
            let x = f64::from(p) * 0.3 + c as f64 * 0.11;
            let mut rows: RowBatch = (0..5)
                .map(|r| {
                    (
                        w(r),
                        AlignedBuf::from_slice(&[x - r as f64 * 0.07, 0.5 - x]),
                    )
                })
                .collect();
            let sum = [i64::from(p) + 3, c as i64];
            rows.push((RowKey::new(0, 20 + c), AlignedBuf::from_slice(&sum)));
            msgs.push(ToShard::Clock {
                worker: p,
                clock: c,
                epoch: 0,
                rows,
                outer: Vec::new(),
                slab: AlignedBuf::default(),
                slab_rows: None,
            });
        }
    }
    for p in 0..2u32 {
        let mut rows: Vec<(RowKey, Clock)> = (0..5).map(|r| (w(r), 4)).collect();
        rows.extend((21..=24).map(|r| (RowKey::new(0, r), 4)));
        msgs.push(ToShard::Fetch { from: p, rows });
        msgs.push(ToShard::Finish { worker: p });
    }
    msgs.extend((0..2).map(|from| ToShard::RunEnd { from, run: 2 }));
    msgs
}

#[test]
fn a_promoted_backup_goes_on_as_a_shard_that_lost_nothing() {
    let of = |p: u32| vec![p; rule_script(p).len()];
    for order in interleavings(&of(0), &of(1)) {
        let (mut keeper, mut alone) = keeper_and_alone(&order);
        let mut promoted = keeper
            .promote(1, 1)
            .expect("shard 0 keeps shard 1's backup");
        assert_eq!(promoted.id(), 1);
        let at = |s: &Shard| state(s, s.clocks.min_clock());
        assert_eq!(at(&promoted), at(&alone), "{order:?}");
        assert_eq!(promoted.clocks.min_clock(), 2);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for msg in next_run() {
            promoted.step(msg.clone(), &mut got);
            alone.step(msg, &mut want);
        }
        for p in 0..2 {
            let answers = answers_to(p, &got);
            assert!(
                answers.iter().any(|a| a.starts_with("rows@4")),
                "{answers:?}"
            );
            assert!(answers.iter().any(|a| a.contains("run: 2")), "{answers:?}");
            assert_eq!(answers, answers_to(p, &want), "process {p}, {order:?}");
        }
        assert_eq!(at(&promoted), at(&alone), "{order:?}");
        assert!(
            got.iter().all(|e| matches!(e, Envelope::Client(..))),
            "no backups"
        );
    }
}

#[test]
fn only_a_kept_backup_other_than_the_coordinators_is_promoted() {
    let world = two_process_world();
    let mut keeper = Shard::new(0, world).with_replicas(2);
    let Err(e) = keeper.promote(0, 0) else {
        panic!("shard 0 promoted")
    };
    assert!(e.contains("coordinator"), "{e}");
    assert!(keeper.promote(1, 0).is_ok());
    let Err(e) = keeper.promote(1, 0) else {
        panic!("promoted twice")
    };
    assert!(e.contains("keeps no backup of shard 1"), "{e}");
    let mut alone = Shard::new(0, world);
    assert!(alone.promote(1, 0).is_err());
}
