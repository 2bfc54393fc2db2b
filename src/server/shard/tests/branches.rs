//! Branches on a shard: a fork keeps the values it copied while the live ones change, a
//! switch serves them — planned and generic rows alike, the next refreshes whole — under
//! every order the transport allows; a park hands out a rows part an unpark takes back;
//! misuse is answered, and a branch op out of place fails the cluster.

use super::*;
use crate::ids::BranchId;
use crate::msg::BranchOp;

fn op(from: u32, op: BranchOp) -> ToShard {
    ToShard::Branch { from, clock: 1, op }
}

fn fork(source: u32, id: u32) -> ToShard {
    let (source, id) = (BranchId(source), BranchId(id));
    op(0, BranchOp::Fork { source, id })
}

fn switch(to: u32) -> ToShard {
    op(0, BranchOp::Switch { to: BranchId(to) })
}

fn set(from: u32, rows: &[(u64, [i64; 2])]) -> ToShard {
    ToShard::SetRows {
        from,
        rows: rows
            .iter()
            .map(|(r, v)| (RowKey::new(0, *r), AlignedBuf::from_slice(v)))
            .collect(),
        last: true,
    }
}

/// The shard's answers to branch ops in `out`, in order.
fn branched(out: &[Envelope]) -> Vec<Result<Vec<u8>, String>> {
    to_clients(out)
        .filter_map(|(to, m)| match m {
            ToClient::Branched { shard: 0, outcome } => {
                assert_eq!(to, 0, "answered to its own process only");
                Some(outcome.clone())
            }
            _ => None,
        })
        .collect()
}

/// A two-process shard (process 0's) after run 1 of [`process_script`]: rows 1 and 2
/// planned, 10 and 11 planned and zeros, 5 generic.
fn after_first_run() -> Shard {
    let (b0, _) = process_script(0);
    let (b1, _) = process_script(1);
    let mut s = Shard::new(0, two_process_world());
    let mut out = Vec::new();
    for m in b0.into_iter().chain(b1) {
        s.step(m, &mut out);
    }
    assert!(rejected(&out).is_empty(), "{out:?}");
    s
}

/// What each process asks for after the ops: every chunk, and rows 5 and 2 the generic
/// way; then it leaves.
fn after(p: u32) -> Vec<ToShard> {
    vec![
        ToShard::SlabFetch {
            from: p,
            epoch: 1,
            required: 1,
            want: WantedChunks::All,
        },
        ToShard::Fetch {
            from: p,
            rows: vec![(RowKey::new(0, 5), 1)],
        },
        ToShard::Leave { from: p },
    ]
}

/// Runs `script`, then every interleaving of the processes' [`after`] scripts on a copy
/// made by `make`; checks that each process gets every chunk whole with rows 1 and 2 as
/// `row1`, `row2`, and row 5 as `row5`.
fn served(make: impl Fn() -> Shard, row1: [i64; 2], row2: [i64; 2], row5: [i64; 2]) {
    for rest in interleavings(&after(0), &after(1)) {
        let mut s = make();
        let mut out = Vec::new();
        for m in rest {
            s.step(m, &mut out);
        }
        assert!(rejected(&out).is_empty(), "{out:?}");
        for p in 0..2u32 {
            let answers = answers_to(p, &out);
            let want = format!("rows@1 [(5, {:?})]", row5.to_vec());
            assert!(answers.contains(&want), "process {p}: {answers:?}");
            let slabs: Vec<(Option<Vec<u32>>, Vec<i64>)> = to_clients(&out)
                .filter(|(to, _)| *to == p)
                .filter_map(|(_, m)| match m {
                    ToClient::SlabRows { rows, bytes, .. } => {
                        Some((rows.clone(), bytes.cast::<i64>().to_vec()))
                    }
                    _ => None,
                })
                .collect();
            // Process 0's chunks: [1], [2, 10]; process 1's: [11], [2, 1].
            let want = if p == 0 {
                vec![(None, row1.to_vec()), (None, [row2, [0, 0]].concat())]
            } else {
                vec![(None, vec![0, 0]), (None, [row2, row1].concat())]
            };
            assert_eq!(
                slabs, want,
                "process {p}: refreshes whole, of the live branch"
            );
        }
    }
}

/// Run 1 left rows 1, 2 and 5 at these values.
const ROW1: [i64; 2] = [41, -41];
const ROW2: [i64; 2] = [32, -32];
const ROW5: [i64; 2] = [201, 2];

/// Forks branch 1, sets rows 2 and 5 of branch 0 (both processes) and returns the shard
/// and its answers so far.
fn forked_then_set() -> (Shard, Vec<Envelope>) {
    let mut s = after_first_run();
    let mut out = Vec::new();
    s.step(fork(0, 1), &mut out);
    s.step(set(0, &[(2, [20, 2]), (5, [50, 5])]), &mut out);
    s.step(set(1, &[]), &mut out);
    (s, out)
}

#[test]
fn a_switch_serves_the_forked_values_whole_under_every_order() {
    let (_, out) = forked_then_set();
    assert_eq!(branched(&out), vec![Ok(Vec::new())]);
    // The live branch has the rows set; branch 1 what the fork copied.
    served(|| forked_then_set().0, ROW1, [20, 2], [50, 5]);
    let switched = || {
        let (mut s, mut out) = forked_then_set();
        s.step(switch(1), &mut out);
        assert_eq!(branched(&out), vec![Ok(Vec::new()), Ok(Vec::new())]);
        s
    };
    served(switched, ROW1, ROW2, ROW5);
    let back = || {
        let mut s = switched();
        let mut out = Vec::new();
        s.step(switch(0), &mut out);
        assert_eq!(branched(&out), vec![Ok(Vec::new())]);
        s
    };
    served(back, ROW1, [20, 2], [50, 5]);
}

#[test]
fn a_branch_op_after_another_process_began_the_next_run_fails_the_cluster() {
    let next = ToShard::Clock {
        worker: 1,
        clock: 2,
        epoch: 1,
        rows: vec![(RowKey::new(0, 5), AlignedBuf::from_slice(&[1i64, 1]))],
        outer: Vec::new(),
        slab: AlignedBuf::from_slice(&[0i64; 4]),
        slab_rows: None,
    };
    for order in interleavings(&[fork(0, 1)], std::slice::from_ref(&next)) {
        let first_is_op = matches!(order[0], ToShard::Branch { .. });
        let mut s = after_first_run();
        let mut out = Vec::new();
        for m in order {
            s.step(m, &mut out);
        }
        if first_is_op {
            assert!(rejected(&out).is_empty(), "{out:?}");
            assert_eq!(branched(&out), vec![Ok(Vec::new())]);
        } else {
            let reasons = rejected(&out);
            assert_eq!(reasons.len(), 2, "every process is told: {out:?}");
            assert!(
                reasons[0] == "a branch op at clock 1 while updates are pending",
                "{reasons:?}"
            );
            assert!(branched(&out).is_empty());
        }
    }
}

#[test]
fn a_parked_branch_comes_back_from_its_part() {
    let (mut s, mut out) = forked_then_set();
    s.step(op(0, BranchOp::Park { id: BranchId(1) }), &mut out);
    let answers = branched(&out);
    let part = answers[1].clone().unwrap();
    let (header, rows) = decode_part(&part);
    assert_eq!((header.shard, header.clock), (0, 1));
    // Rows 10 and 11 are zeros: not written.
    let want = vec![(1, ROW1.to_vec()), (2, ROW2.to_vec()), (5, ROW5.to_vec())];
    assert_eq!(rows, want);
    out.clear();
    s.step(switch(1), &mut out);
    let gone = branched(&out).remove(0).unwrap_err();
    assert_eq!(gone, "branch 1 is not on this shard");
    let unparked = move || {
        let mut s = forked_then_set().0;
        let mut out = Vec::new();
        let id = BranchId(2);
        let part = part.clone();
        s.step(op(0, BranchOp::Unpark { id, part }), &mut out);
        s.step(switch(2), &mut out);
        assert_eq!(branched(&out), [Ok(Vec::new()), Ok(Vec::new())]);
        s
    };
    served(unparked, ROW1, ROW2, ROW5);
}

#[test]
fn misuse_is_answered_and_the_shard_goes_on() {
    let mut s = after_first_run();
    let mut out = Vec::new();
    let id = |n| BranchId(n);
    s.step(op(0, BranchOp::Free { id: id(0) }), &mut out);
    s.step(op(0, BranchOp::Park { id: id(0) }), &mut out);
    s.step(op(0, BranchOp::Free { id: id(9) }), &mut out);
    s.step(fork(9, 1), &mut out);
    s.step(fork(0, 0), &mut out);
    let part = vec![1, 2, 3];
    s.step(op(0, BranchOp::Unpark { id: id(3), part }), &mut out);
    s.step(switch(0), &mut out);
    let answers = branched(&out);
    let errors: Vec<&str> = answers
        .iter()
        .filter_map(|a| a.as_ref().err())
        .map(|e| e.as_str())
        .collect();
    assert_eq!(
        errors[..5],
        [
            "branch 0 is the live branch",
            "branch 0 is the live branch",
            "branch 9 is not on this shard",
            "branch 9 is not on this shard",
            "branch 0 exists already",
        ]
    );
    assert!(
        errors[5].starts_with("a parked branch's rows:"),
        "{}",
        errors[5]
    );
    assert_eq!(
        answers[6],
        Ok(Vec::new()),
        "a switch to the live branch does nothing"
    );
    assert!(
        rejected(&out).is_empty(),
        "misuse does not fail the cluster: {out:?}"
    );
}

#[test]
fn after_a_switch_every_refresh_is_whole() {
    // Run 1 sent both processes every chunk: without the switch, the next refreshes
    // would carry no row.
    let switched = || {
        let mut s = after_first_run();
        let mut out = Vec::new();
        s.step(fork(0, 1), &mut out);
        s.step(switch(1), &mut out);
        s
    };
    served(switched, ROW1, ROW2, ROW5);
}

#[test]
fn a_branch_op_from_another_process_or_a_migration_with_slots_fails_the_cluster() {
    let mut s = after_first_run();
    let mut out = Vec::new();
    s.step(op(1, BranchOp::Switch { to: BranchId(0) }), &mut out);
    assert_eq!(
        rejected(&out),
        ["process 1 asked shard 0 for a branch op"; 2]
    );
    let mut s = after_first_run();
    let mut out = Vec::new();
    s.step(fork(0, 1), &mut out);
    let migrate = ToShard::Migrate {
        from: 0,
        overrides: Vec::new(),
    };
    s.step(migrate, &mut out);
    let reasons = rejected(&out);
    assert!(
        reasons[0].contains("migrates rows while branches other than the live one exist"),
        "{reasons:?}"
    );
}
