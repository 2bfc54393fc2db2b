//! A custom update rule at the shard: stepped once per clock with the gradients of both
//! processes summed in worker order, its state and step count kept per row, under every
//! order of their messages the transport allows; a shard whose process lacks the rule
//! refuses its table; a step that panics fails the cluster naming the rule, and the
//! shard goes on answering.

use super::*;
use crate::rule::{Real, Rule, UpdateRule, UpdateRules};

/// `v = μ·v + g; w -= (lr / t) · v`, and a panic on a gradient of exactly 13.
struct Decayed;

impl UpdateRule for Decayed {
    fn params(&self) -> &'static [&'static str] {
        &["lr", "momentum"]
    }
    fn state_per_element(&self) -> usize {
        1
    }
    fn step<F: Real>(&self, p: &[f64], value: &mut [F], grad: &[F], state: &mut [F], t: u64) {
        let (lr, mu) = (F::of(p[0] / t as f64), F::of(p[1]));
        for ((w, &g), v) in value.iter_mut().zip(grad).zip(state.iter_mut()) {
            assert!(g != F::of(13.0), "unlucky gradient");
            *v = mu * *v + g;
            *w = *w - lr * *v;
        }
    }
}

fn registry() -> Arc<UpdateRules> {
    let mut rules = UpdateRules::default();
    rules.register("decayed", Decayed);
    Arc::new(rules)
}

fn rule() -> Rule {
    registry().rule("decayed", &[0.5, 0.75]).unwrap()
}

/// Table 1, "w": one `f64` per row, [`rule`].
fn table_w() -> TableMeta {
    TableMeta {
        id: 1,
        name: "w".into(),
        width: 1,
        elem: ElemType::F64,
        rows: None,
        rule: rule(),
    }
}

/// Worker `worker`'s clock `clock` with gradient `g` for row `r` of "w".
fn grad(worker: WorkerId, clock: Clock, r: u64, g: f64) -> ToShard {
    ToShard::Clock {
        worker,
        clock,
        epoch: 0,
        rows: vec![(RowKey::new(1, r), AlignedBuf::from_slice(&[g]))],
        outer: Vec::new(),
        slab: AlignedBuf::default(),
        slab_rows: None,
    }
}

/// Row `r` of "w" at clock `required`, for process `p`.
fn fetch_w(p: ProcessId, r: u64, required: Clock) -> ToShard {
    ToShard::Fetch {
        from: p,
        rows: vec![(RowKey::new(1, r), required)],
    }
}

/// The last value of row `r` of "w" answered to process `p` in `out`.
fn answered(p: ProcessId, r: u64, out: &[Envelope]) -> Option<f64> {
    to_clients(out)
        .filter(|(to, _)| *to == p)
        .filter_map(|(_, m)| match m {
            ToClient::Rows { rows, .. } => rows
                .iter()
                .find(|(k, _)| *k == RowKey::new(1, r))
                .map(|(_, b)| b.cast::<f64>()[0]),
            _ => None,
        })
        .last()
}

#[test]
fn a_custom_rule_steps_each_clock_once_under_every_order_the_transport_allows() {
    // Process p (worker p): clock 1 and 2 with gradients for row 0, then a read at 2.
    let script = |p: u32| {
        let g = |c: u64| 1.0 + f64::from(p) + c as f64;
        vec![
            grad(p, 1, 0, g(1)),
            grad(p, 2, 0, g(2)),
            fetch_w(p, 0, 2),
            ToShard::Finish { worker: p },
            ToShard::RunEnd { from: p, run: 1 },
            ToShard::Leave { from: p },
        ]
    };
    // The reference: per clock, 0 + g(worker 0) + g(worker 1), one step.
    let (mut w, mut v) = ([0.0f64], [0.0f64]);
    for (t, c) in [1u64, 2].into_iter().enumerate() {
        let sum = 0.0 + (1.0 + c as f64) + (2.0 + c as f64);
        registry().step(&rule(), &mut w, &[sum], &mut v, t as u64 + 1);
    }
    let (a, b) = (script(0), script(1));
    let mut orders = 0;
    for order in interleavings(&a, &b) {
        orders += 1;
        let mut s = Shard::new(0, two_process_world()).with_update_rules(registry());
        let mut out = Vec::new();
        s.step(ToShard::CreateTable { meta: table_w() }, &mut out);
        for m in order {
            s.step(m, &mut out);
        }
        assert!(rejected(&out).is_empty(), "{out:?}");
        for p in 0..2 {
            assert_eq!(answered(p, 0, &out), Some(w[0]), "process {p}");
        }
        assert!(s.released());
    }
    assert_eq!(orders, 924);
}

#[test]
fn a_shard_whose_process_lacks_the_rule_refuses_its_table() {
    let mut s = Shard::new(0, two_process_world());
    let mut out = Vec::new();
    s.step(ToShard::CreateTable { meta: table_w() }, &mut out);
    let why = rejected(&out);
    assert!(
        why.iter()
            .all(|r| r.contains("update rule \"decayed\" is not registered")),
        "{why:?}"
    );
    assert_eq!(why.len(), 2, "every process is told");
}

#[test]
fn a_panicking_step_fails_the_cluster_naming_the_rule_and_the_shard_goes_on() {
    let mut s = Shard::new(0, World::single(1, 1)).with_update_rules(registry());
    let mut out = Vec::new();
    s.step(ToShard::CreateTable { meta: table_w() }, &mut out);
    s.step(grad(0, 1, 0, 13.0), &mut out);
    let why = rejected(&out);
    assert_eq!(why.len(), 1, "{out:?}");
    assert!(
        why[0].contains("update rule decayed(0.5, 0.75) panicked stepping row 0 of table 'w'")
            && why[0].contains("unlucky gradient"),
        "{}",
        why[0]
    );
    out.clear();
    s.step(fetch_w(0, 0, 1), &mut out);
    assert!(answered(0, 0, &out).is_some(), "{out:?}");
}
