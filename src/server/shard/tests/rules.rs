//! Update rules at the shard: gradients summed per clock and stepped once, and the
//! messages that would break a rule refused.

use super::*;
use crate::rule::Rule;

/// A shard of one process with two workers and table 0 ("w": one f64, SGD at lr 0.5).
fn sgd_shard() -> Shard {
    let mut s = Shard::new(0, World::single(2, 1));
    let meta = TableMeta {
        id: 0,
        name: "w".into(),
        width: 1,
        elem: ElemType::F64,
        rows: None,
        rule: Rule::Sgd { lr: 0.5 },
    };
    s.step(ToShard::CreateTable { meta }, &mut Vec::new());
    s
}

fn grad(worker: WorkerId, clock: Clock, g: f64) -> ToShard {
    ToShard::Clock {
        worker,
        clock,
        epoch: 0,
        rows: vec![(RowKey::new(0, 0), AlignedBuf::from_slice(&[g]))],
        outer: Vec::new(),
        slab: AlignedBuf::default(),
        slab_rows: None,
    }
}

fn value(s: &mut Shard, required: Clock) -> Vec<f64> {
    let mut out = Vec::new();
    let fetch = ToShard::Fetch {
        from: 0,
        rows: vec![(RowKey::new(0, 0), required)],
    };
    s.step(fetch, &mut out);
    let value = to_clients(&out)
        .find_map(|(_, m)| match m {
            ToClient::Rows { rows, .. } => Some(rows[0].1.cast::<f64>().to_vec()),
            _ => None,
        })
        .expect("an answer");
    value
}

#[test]
fn a_clock_is_stepped_once_with_its_summed_gradient_in_either_order() {
    for order in [[0, 1], [1, 0]] {
        let mut s = sgd_shard();
        let mut out = Vec::new();
        for w in order {
            s.step(grad(w, 1, 1.0 + w as f64), &mut out);
        }
        assert!(rejected(&out).is_empty(), "{out:?}");
        // One step with 1 + 2, not two steps: 0 - 0.5 * 3.
        assert_eq!(value(&mut s, 1), [-1.5]);
    }
}

#[test]
fn a_rule_of_another_kind_or_out_of_range_fails_the_cluster() {
    let refused = |rule: Rule, table: u32| {
        let mut s = sgd_shard();
        let mut out = Vec::new();
        s.step(
            ToShard::SetRule {
                from: 0,
                table,
                rule,
            },
            &mut out,
        );
        rejected(&out).first().map(|r| r.to_string())
    };
    assert_eq!(refused(Rule::Sgd { lr: 0.1 }, 0), None);
    let why = refused(
        Rule::AdaGrad {
            lr: 0.1,
            eps: 1e-8,
            initial: 0.0,
        },
        0,
    )
    .unwrap();
    assert!(why.contains("another kind"), "{why}");
    let why = refused(Rule::Sgd { lr: f64::NAN }, 0).unwrap();
    assert!(why.contains("must be finite"), "{why}");
    let why = refused(Rule::Sgd { lr: 0.1 }, 9).unwrap();
    assert!(why.contains("unknown table #9"), "{why}");
    // A table created with a bad rule (a hostile peer) is refused too.
    let mut s = Shard::new(0, World::single(1, 1));
    let mut out = Vec::new();
    let meta = TableMeta {
        id: 0,
        name: "i".into(),
        width: 1,
        elem: ElemType::I64,
        rows: None,
        rule: Rule::Sgd { lr: 0.1 },
    };
    s.step(ToShard::CreateTable { meta }, &mut out);
    assert!(
        rejected(&out)[0].contains("needs a table of f32 or f64"),
        "{out:?}"
    );
}
