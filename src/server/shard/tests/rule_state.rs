//! Update-rule state travelling with its rows: written into a checkpoint part, brought
//! back by a restore and handed over by a migration — each under every order of its
//! messages — and a row that travelled steps exactly as one that stayed.

use super::*;
use crate::msg::{RuleState, RuleStates};
use crate::placement::Placement;
use crate::rule::Rule;

const MOMENTUM: Rule = Rule::Momentum {
    lr: 0.5,
    momentum: 0.75,
};

/// Table 1, "w": one `f64` per row, [`MOMENTUM`] (one element of state).
fn table_w() -> TableMeta {
    TableMeta {
        id: 1,
        name: "w".into(),
        width: 1,
        elem: ElemType::F64,
        rows: None,
        rule: MOMENTUM,
    }
}

fn w(r: u64) -> RowKey {
    RowKey::new(1, r)
}

/// Shard `id` of `world` with [`table_t`] and [`table_w`].
fn ruled_shard(id: ShardId, world: World) -> Shard {
    let mut s = shard_in(id, world);
    s.step(ToShard::CreateTable { meta: table_w() }, &mut Vec::new());
    s
}

/// Worker `worker`'s clock `clock`, with gradient `g` for each `(row, g)` of "w".
fn grads(worker: WorkerId, clock: Clock, rows: &[(u64, f64)]) -> ToShard {
    ToShard::Clock {
        worker,
        clock,
        epoch: 0,
        rows: rows
            .iter()
            .map(|&(r, g)| (w(r), AlignedBuf::from_slice(&[g])))
            .collect(),
        outer: Vec::new(),
        slab: AlignedBuf::default(),
        slab_rows: None,
    }
}

/// The values of "w"'s rows in `out`'s answers to process `p`.
fn w_values(p: ProcessId, out: &[Envelope]) -> Vec<(u64, f64)> {
    let mut v: Vec<(u64, f64)> = to_clients(out)
        .filter(|(to, _)| *to == p)
        .flat_map(|(_, m)| match m {
            ToClient::Rows { rows, .. } => rows
                .iter()
                .filter(|(k, _)| k.table == 1)
                .map(|(k, b)| (k.row, b.cast::<f64>()[0]))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    v.sort_by_key(|(r, _)| *r);
    v
}

/// A state of [`MOMENTUM`]: `steps` taken, velocity `v`.
fn state(steps: u64, v: f64) -> RuleState {
    RuleState {
        steps,
        state: AlignedBuf::from_slice(&[v]),
    }
}

/// What a row of value `value` and velocity `v` holds after one more step with `g`.
fn stepped(value: f64, v: f64, steps: u64, g: f64) -> f64 {
    let (mut value, mut v) = ([value], [v]);
    MOMENTUM.step(&mut value, &[g], &mut v, steps + 1);
    value[0]
}

#[test]
fn a_checkpoint_part_holds_every_rule_state_even_of_a_row_stepped_to_zeros() {
    let mut s = ruled_shard(0, World::single(1, 1));
    let mut out = Vec::new();
    // Rows 0 and 1 stepped twice, row 1 back to zero (v = 2, then 0.75 · 2 - 3.5).
    s.step(grads(0, 1, &[(0, 1.0), (1, 2.0)]), &mut out);
    s.step(grads(0, 2, &[(0, 2.0), (1, -3.5)]), &mut out);
    s.step(ToShard::Finish { worker: 0 }, &mut out);
    s.step(ToShard::RunEnd { from: 0, run: 1 }, &mut out);
    assert!(rejected(&out).is_empty(), "{out:?}");
    let ask = ToShard::Checkpoint {
        from: 0,
        root: std::env::temp_dir(),
        clock: 2,
    };
    let write = s.handle(ask, &mut out).expect("a part to write");
    let mut bytes = Vec::new();
    s.encode_part(&write, &mut bytes).unwrap();
    let (mut rows, mut states) = (Vec::new(), Vec::new());
    let sizes = |t: u32| match t {
        0 => Some((16, None)),
        1 => Some((8, Some(8))),
        _ => None,
    };
    let header = rows_part::read(&bytes[..], sizes, |item| match item {
        rows_part::Item::Row(k, b) => rows.push((k, b.cast::<f64>().to_vec())),
        rows_part::Item::State(k, s) => states.push((k, s)),
    })
    .unwrap();
    assert_eq!((header.rows, header.states), (1, 2));
    // Row 0: -0.5 · 1, then v = 0.75 + 2 and -0.5 · 2.75 more.
    assert_eq!(rows, vec![(w(0), vec![-0.5 - 1.375])]);
    assert_eq!(states, vec![(w(0), state(2, 2.75)), (w(1), state(2, -2.0))]);
}

/// What process `p` sends in a resume of a two-process cluster with rule states: process
/// 0 two messages (row 1 with its value and state; row 2's state alone, its value zeros),
/// process 1 one (row 3); then after `Restored` a run of one clock — a gradient for every
/// row, a read of the next clock — and `Leave`.
fn restore_script(p: u32) -> (Vec<ToShard>, Vec<ToShard>) {
    let restore = |rows, states: RuleStates, last| ToShard::Restore {
        from: p,
        clock: 6,
        rows,
        states,
        last,
    };
    let value = |r: u64, v: f64| (w(r), AlignedBuf::from_slice(&[v]));
    let mut before = vec![
        ToShard::CreateTable { meta: table_t() },
        ToShard::CreateTable { meta: table_w() },
    ];
    if p == 0 {
        before.push(restore(
            vec![value(1, 1.0)],
            vec![(w(1), state(2, 2.0))],
            false,
        ));
        before.push(restore(vec![], vec![(w(2), state(1, 4.0))], true));
    } else {
        before.push(restore(
            vec![value(3, 3.0)],
            vec![(w(3), state(5, -1.0))],
            true,
        ));
    }
    let after = vec![
        grads(p, 7, &[1, 2, 3].map(|r| (r, 1.0 + f64::from(p)))),
        ToShard::Fetch {
            from: p,
            rows: (1..=3).map(|r| (w(r), 7)).collect(),
        },
        ToShard::Finish { worker: p },
        ToShard::RunEnd { from: p, run: 1 },
        ToShard::Leave { from: p },
    ];
    (before, after)
}

#[test]
fn restored_rule_states_step_on_under_every_order_the_transport_allows() {
    let (b0, a0) = restore_script(0);
    let (b1, a1) = restore_script(1);
    // Each row's next step: the gradients of both workers, 1 + 2.
    let expected = vec![
        (1, stepped(1.0, 2.0, 2, 3.0)),
        (2, stepped(0.0, 4.0, 1, 3.0)),
        (3, stepped(3.0, -1.0, 5, 3.0)),
    ];
    let mut orders = 0;
    for before in interleavings(&b0, &b1) {
        for after in interleavings(&a0, &a1) {
            orders += 1;
            let mut s = Shard::new(0, two_process_world());
            let mut out = Vec::new();
            for m in before.iter().chain(&after) {
                s.step(m.clone(), &mut out);
            }
            assert!(rejected(&out).is_empty(), "{out:?}");
            assert!(s.released());
            let restored = out
                .iter()
                .filter(|m| matches!(m, Envelope::Client(_, ToClient::Restored { .. })))
                .count();
            assert_eq!(restored, 2);
            for p in 0..2 {
                assert_eq!(w_values(p, &out), expected, "process {p}");
            }
        }
    }
    assert_eq!(orders, 35 * 252);
}

#[test]
fn a_bad_rule_state_or_one_given_twice_fails_the_cluster() {
    let refused = |states: Vec<RuleStates>| {
        let mut s = ruled_shard(0, two_process_world());
        let mut out = Vec::new();
        let n = states.len();
        for (i, states) in states.into_iter().enumerate() {
            let restore = ToShard::Restore {
                from: 0,
                clock: 4,
                rows: vec![],
                states,
                last: i + 1 == n,
            };
            s.step(restore, &mut out);
        }
        rejected(&out).first().map(|r| r.to_string())
    };
    assert_eq!(refused(vec![vec![(w(0), state(1, 1.0))]]), None);
    let summed = vec![vec![(RowKey::new(0, 1), state(1, 1.0))]];
    assert!(refused(summed)
        .unwrap()
        .contains("table 't', whose rule is a sum"));
    let unknown = vec![vec![(RowKey::new(7, 1), state(1, 1.0))]];
    assert!(refused(unknown).unwrap().contains("unknown table #7"));
    let long = RuleState {
        steps: 1,
        state: AlignedBuf::from_slice(&[1.0f64, 2.0]),
    };
    assert!(refused(vec![vec![(w(0), long)]])
        .unwrap()
        .contains("table 'w' row 0 has 16 bytes, expected 8"));
    let twice = vec![vec![(w(0), state(1, 1.0))], vec![(w(0), state(1, 1.0))]];
    assert!(refused(twice)
        .unwrap()
        .contains("rule state restored twice"));
}

/// Shard 1 of 3 (one process each, one worker each): rows 0..8 of "w" stepped once by
/// gradient `r` from value zero (row 0's gradient is all zeros: no step, no state).
fn seeded_ruled_shard() -> Shard {
    let world = World {
        processes: 3,
        workers: 1,
        shards: 1,
    };
    let mut s = ruled_shard(1, world);
    let mut out = Vec::new();
    let rows: Vec<(u64, f64)> = (0..8).map(|r| (r, r as f64)).collect();
    s.step(grads(0, 1, &rows), &mut out);
    s.step(grads(1, 1, &[]), &mut out);
    s.step(grads(2, 1, &[]), &mut out);
    assert!(rejected(&out).is_empty() && s.pending.is_empty(), "{out:?}");
    s
}

#[test]
fn a_migration_hands_rule_states_over_with_their_rows_in_every_order() {
    // Rows 1 and 2 leave for shards 0 and 2; row 100 comes from shard 0 with its state.
    let overrides = vec![(w(1), 0), (w(2), 2), (w(100), 1)];
    let mut placement = Placement::hashed(3);
    for &(k, s) in &overrides {
        placement.set(k, s);
    }
    let script = [
        ToShard::Migrate {
            from: 1,
            overrides: overrides.clone(),
        },
        ToShard::Adopt {
            shard: 0,
            rows: vec![(w(100), AlignedBuf::from_slice(&[-2.0f64]))],
            states: vec![(w(100), state(3, 0.5))],
        },
        ToShard::Adopt {
            shard: 2,
            rows: vec![],
            states: vec![],
        },
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
        let mut s = seeded_ruled_shard();
        let mut out = Vec::new();
        for m in &order {
            s.step(m.clone(), &mut out);
        }
        assert!(rejected(&out).is_empty(), "{out:?}");
        let mut handed: Vec<(ShardId, u64, RuleState)> = Vec::new();
        for m in &out {
            if let Envelope::Shard(
                to,
                ToShard::Adopt {
                    shard: 1,
                    states,
                    rows,
                },
            ) = m
            {
                for (k, st) in states {
                    assert!(
                        rows.iter().any(|(r, _)| r == k),
                        "{k:?} leaves without its value"
                    );
                    handed.push((*to, k.row, st.clone()));
                }
            }
        }
        // Row r (1..8) stepped once with gradient r: velocity r, one step.
        for r in 1..8u64 {
            let home = placement.shard_of(w(r));
            let held = s.rules.get(w(r)).map(|(steps, b)| (steps, b.to_vec()));
            if home == 1 {
                assert_eq!(
                    held,
                    Some((1, (r as f64).to_le_bytes().to_vec())),
                    "row {r}"
                );
            } else {
                assert_eq!(held, None, "row {r} left");
                assert!(
                    handed.contains(&(home, r, state(1, r as f64))),
                    "row {r} goes to {home} with its state: {handed:?}"
                );
            }
        }
        assert!(s.rules.get(w(0)).is_none(), "row 0 never stepped");
        assert_eq!(
            s.rules.get(w(100)).map(|(steps, b)| (steps, b.to_vec())),
            Some((3, 0.5f64.to_le_bytes().to_vec()))
        );
    }
}

#[test]
fn a_migrated_rule_row_steps_as_one_that_stayed() {
    // Shard 1 hands rows 1 and 2 to shards 0 and 2; each steps its row once more, as
    // shard 1 steps its copy where no migration moved it.
    let overrides = vec![(w(1), 0), (w(2), 2)];
    let mut source = seeded_ruled_shard();
    let mut out = Vec::new();
    let migrate = |from| ToShard::Migrate {
        from,
        overrides: overrides.clone(),
    };
    source.step(migrate(1), &mut out);
    let world = World {
        processes: 3,
        workers: 1,
        shards: 1,
    };
    for (target, other, r) in [(0, 2, 1u64), (2, 0, 2)] {
        let adopt = out
            .iter()
            .find_map(|m| match m {
                Envelope::Shard(to, a @ ToShard::Adopt { .. }) if *to == target => Some(a.clone()),
                _ => None,
            })
            .expect("an Adopt for each other shard");
        let mut moved = ruled_shard(target, world);
        let mut stayed = seeded_ruled_shard();
        let mut news = Vec::new();
        // The migration on the row's new shard, then every worker at clock 1.
        let empty = ToShard::Adopt {
            shard: other,
            rows: vec![],
            states: vec![],
        };
        for m in [migrate(target), adopt, empty] {
            moved.step(m, &mut news);
        }
        for worker in 0..3 {
            moved.step(grads(worker, 1, &[]), &mut news);
        }
        for s in [&mut moved, &mut stayed] {
            s.step(grads(0, 2, &[(r, 0.25)]), &mut news);
            s.step(grads(1, 2, &[]), &mut news);
            s.step(grads(2, 2, &[]), &mut news);
        }
        assert!(rejected(&news).is_empty(), "{news:?}");
        let value = |s: &Shard| s.rows.get(&w(r)).map(|v| v.cast::<f64>()[0].to_bits());
        let expected = stepped(-0.5 * r as f64, r as f64, 1, 0.25);
        assert_eq!(value(&moved), Some(expected.to_bits()), "row {r}");
        assert_eq!(value(&moved), value(&stayed), "row {r}");
    }
}
