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
    s.step(Msg::Finish { worker: 0 }, &mut out);
    s.step(Msg::RunEnd { from: 0, run: 1 }, &mut out);
    s.step(Msg::Leave { from: 1 }, &mut out);
    let rejected: Vec<&String> = out
        .iter()
        .filter_map(|(to, m)| match m {
            Msg::Rejected { reason, .. } if *to == Endpoint::Client(0) => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(rejected.len(), 1, "{out:?}");
    assert!(rejected[0].contains("process 1 left"), "{}", rejected[0]);
}
