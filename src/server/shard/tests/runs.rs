//! The run barrier and leaving, and the answers two processes get in every order the
//! transport allows.

use super::*;

#[test]
fn two_processes_get_the_same_answers_in_every_order_the_transport_allows() {
    let world = two_process_world();
    let ((b0, a0), (b1, a1)) = (process_script(0), process_script(1));
    let mut expected: Option<(Vec<String>, Vec<String>)> = None;
    let mut orders = 0;
    // Before the barrier any merge is possible; after it, a process sends only once
    // the barrier answered, i.e. after both `RunEnd`s.
    for before in interleavings(&b0, &b1) {
        for after in interleavings(&a0, &a1) {
            orders += 1;
            let mut s = Shard::new(0, world);
            let mut out = Vec::new();
            for m in before.iter().chain(&after) {
                s.step(m.clone(), &mut out);
            }
            assert!(s.released(), "both processes left");
            let got = (answers_to(0, &out), answers_to(1, &out));
            match &expected {
                None => expected = Some(got),
                Some(e) => assert_eq!(&got, e),
            }
        }
    }
    assert_eq!(orders, 924 * 6);
    let (p0, p1) = expected.unwrap();
    // Row 2 got 2 (process 0) and 30 (process 1); row 1 got 1 and 40.
    assert!(p0.contains(&"slab 1/0@1 [41, -41]".to_string()), "{p0:?}");
    assert!(
        p0.contains(&"slab 1/1@1 [32, -32, 0, 0]".to_string()),
        "{p0:?}"
    );
    assert!(
        p1.contains(&"slab 1/1@1 [32, -32, 41, -41]".to_string()),
        "{p1:?}"
    );
    assert!(p1
        .iter()
        .any(|a| a.contains("RunReady") && a.contains("start: 1")));
    assert!(
        p0.contains(&"rows@1 [(5, [201, 2]), (2, [32, -32])]".to_string()),
        "{p0:?}"
    );
}

#[test]
fn a_process_that_leaves_early_fails_the_barrier_instead_of_hanging_it() {
    let world = World {
        processes: 2,
        workers: 1,
        shards: 1,
    };
    let mut s = Shard::new(0, world);
    let mut out = Vec::new();
    s.step(ToShard::Finish { worker: 0 }, &mut out);
    s.step(ToShard::RunEnd { from: 0, run: 1 }, &mut out);
    s.step(ToShard::Leave { from: 1 }, &mut out);
    let rejected: Vec<&String> = to_clients(&out)
        .filter_map(|(to, m)| match m {
            ToClient::Rejected { reason, .. } if to == 0 => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(rejected.len(), 1, "{out:?}");
    assert!(rejected[0].contains("process 1 left"), "{}", rejected[0]);
}

/// Rejections `out` holds for process `p`.
fn rejections_to(p: ProcessId, out: &[Envelope]) -> Vec<String> {
    to_clients(out)
        .filter_map(|(to, m)| match m {
            ToClient::Rejected { reason, .. } if to == p => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// Process 0 ends run 1 and leaves; process 1 ends run 1 and goes on to run 2 (its
/// worker's work, or only the end of that run, once the barrier answered). In every order the transport allows, both
/// processes — the one that left too — are told, naming both and the runs; and when
/// process 1 leaves instead of going on, nobody is.
#[test]
fn a_process_that_went_on_after_another_left_fails_both_in_every_order() {
    let world = World {
        processes: 2,
        workers: 1,
        shards: 1,
    };
    let p0 = [
        ToShard::Finish { worker: 0 },
        ToShard::RunEnd { from: 0, run: 1 },
        ToShard::Leave { from: 0 },
    ];
    let p1_run1 = [
        ToShard::Finish { worker: 1 },
        ToShard::RunEnd { from: 1, run: 1 },
    ];
    for (went_on, p1_after) in [
        (true, vec![ToShard::Finish { worker: 1 }]),
        // A shard that process 1's run 2 sent nothing but its end.
        (true, vec![ToShard::RunEnd { from: 1, run: 2 }]),
        (false, vec![ToShard::Leave { from: 1 }]),
    ] {
        let mut orders = 0;
        // Process 1's messages after its RunEnd go only once the barrier answered, i.e.
        // after process 0's RunEnd: p0's Finish and RunEnd come first, then any merge of
        // p0's Leave with p1's rest.
        for before in interleavings(&p0[..2], &p1_run1) {
            for after in interleavings(&p0[2..], &p1_after) {
                orders += 1;
                let mut s = Shard::new(0, world);
                let mut out = Vec::new();
                for m in before.iter().chain(&after) {
                    s.step(m.clone(), &mut out);
                }
                for p in 0..2 {
                    let r = rejections_to(p, &out);
                    if went_on {
                        assert_eq!(r.len(), 1, "process {p}: {r:?} after {before:?} {after:?}");
                        assert!(
                            r[0].contains("process 0 left the cluster after run 1")
                                && r[0].contains("process 1 went on to run 2"),
                            "{}",
                            r[0]
                        );
                    } else {
                        assert!(r.is_empty(), "process {p}: {r:?}");
                    }
                }
            }
        }
        assert_eq!(orders, 6 * 2);
    }
}
