//! Rank-k updates at the shard: multiplied out into the row deltas a worker would have
//! sent (bit for bit, summed in `s` order), stepped through the rule with the clock's
//! other gradients; and every malformed one fails the cluster by name, never panics.

use super::*;
use crate::msg::{Outer, ToClient, ToShard};
use crate::rule::Rule;

/// A shard of one process with two workers; table 0 ("w": width 3, f32, SGD at lr 1,
/// rows 0..4) and table 1 ("s": the same, summing).
fn shard() -> Shard {
    let mut s = Shard::new(0, World::single(2, 1));
    for (id, name, rule) in [(0, "w", Rule::Sgd { lr: 1.0 }), (1, "s", Rule::Sum)] {
        let meta = TableMeta {
            id,
            name: name.into(),
            width: 3,
            elem: ElemType::F32,
            rows: Some(4),
            rule,
        };
        s.step(ToShard::CreateTable { meta }, &mut Vec::new());
    }
    s
}

/// Table 2 ("wide": 65536 columns, 4096 rows, SGD).
fn wide_table(s: &mut Shard) {
    let meta = TableMeta {
        id: 2,
        name: "wide".into(),
        width: 1 << 16,
        elem: ElemType::F32,
        rows: Some(4096),
        rule: Rule::Sgd { lr: 1.0 },
    };
    s.step(ToShard::CreateTable { meta }, &mut Vec::new());
}

fn clock_with(worker: WorkerId, rows: RowBatch, outer: Vec<Outer>) -> ToShard {
    ToShard::Clock {
        worker,
        clock: 1,
        epoch: 0,
        rows,
        outer,
        slab: AlignedBuf::default(),
        slab_rows: None,
    }
}

fn outer(table: u32, rows: Vec<u64>, left: &[f32], right: &[f32]) -> Outer {
    Outer {
        table,
        rows,
        left: AlignedBuf::from_slice(left),
        right: AlignedBuf::from_slice(right),
    }
}

fn values(s: &mut Shard, rows: &[u64]) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    let fetch = ToShard::Fetch {
        from: 0,
        rows: rows.iter().map(|&r| (RowKey::new(0, r), 1)).collect(),
    };
    s.step(fetch, &mut out);
    let mut got: Vec<(u64, Vec<f32>)> = to_clients(&out)
        .flat_map(|(_, m)| match m {
            ToClient::Rows { rows, .. } => rows
                .iter()
                .map(|(k, v)| (k.row, v.cast::<f32>().to_vec()))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    got.sort_by_key(|(r, _)| *r);
    got.into_iter().map(|(_, v)| v).collect()
}

#[test]
fn factors_step_the_rows_as_their_multiplied_out_deltas_do() {
    // k = 3 awkward floats, rows 3 and 1 (in that order) of width 3.
    let left = [0.1f32, -0.7, 1e-3, 2.5, 0.3, -0.9];
    let right = [1.0f32, 0.2, -3.0, 0.5, 0.5, 0.125, 7.0, -1e-2, 0.33];
    let mut by_factors = shard();
    let mut out = Vec::new();
    let o = outer(0, vec![3, 1], &left, &right);
    by_factors.step(clock_with(0, Vec::new(), vec![o]), &mut out);
    // Worker 1 sends a plain gradient to row 1 in the same clock.
    let plain = vec![(
        RowKey::new(0, 1),
        AlignedBuf::from_slice(&[1.0f32, 1.0, 1.0]),
    )];
    by_factors.step(clock_with(1, plain.clone(), Vec::new()), &mut out);
    assert!(rejected(&out).is_empty(), "{out:?}");
    // The same deltas multiplied out by hand, in s order with a multiply then an add.
    let delta = |i: usize| -> Vec<f32> {
        (0..3)
            .map(|j| (0..3).fold(0.0f32, |acc, s| acc + left[s * 2 + i] * right[s * 3 + j]))
            .collect()
    };
    let mut by_rows = shard();
    let rows = vec![
        (RowKey::new(0, 3), AlignedBuf::from_slice(&delta(0))),
        (RowKey::new(0, 1), AlignedBuf::from_slice(&delta(1))),
    ];
    by_rows.step(clock_with(0, rows, Vec::new()), &mut out);
    by_rows.step(clock_with(1, plain, Vec::new()), &mut out);
    assert!(rejected(&out).is_empty(), "{out:?}");
    let (a, b) = (
        values(&mut by_factors, &[1, 3]),
        values(&mut by_rows, &[1, 3]),
    );
    assert_eq!(a, b);
    assert_ne!(a[1], vec![0.0; 3], "row 3 was stepped");
}

#[test]
fn a_malformed_rank_k_update_fails_the_cluster_by_name() {
    let cases: Vec<(Outer, &str)> = vec![
        (outer(9, vec![0], &[1.0], &[1.0; 3]), "unknown table #9"),
        (
            outer(1, vec![0], &[1.0], &[1.0; 3]),
            "table 's', which has no update rule",
        ),
        (
            outer(0, vec![], &[], &[]),
            "0 bytes of left factors for 0 rows",
        ),
        (
            outer(0, vec![0, 1], &[1.0; 3], &[1.0; 3]),
            "12 bytes of left factors for 2 rows",
        ),
        (
            outer(0, vec![0], &[1.0; 2], &[1.0; 3]),
            "expected 2 rows of 12 bytes",
        ),
        (
            outer(0, vec![4], &[1.0], &[1.0; 3]),
            "row 4: the table has 4 rows",
        ),
        (
            outer(0, vec![2, 2], &[1.0; 2], &[1.0; 3]),
            "names row 2 twice",
        ),
    ];
    for (o, want) in cases {
        let mut s = shard();
        wide_table(&mut s);
        let mut out = Vec::new();
        s.step(clock_with(0, Vec::new(), vec![o]), &mut out);
        let why = rejected(&out);
        assert!(why.iter().any(|r| r.contains(want)), "{want}: {why:?}");
    }
}
