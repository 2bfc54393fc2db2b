//! Setting rows between runs: in every order the transport allows, planned and generic
//! rows alike, the next refreshes whole; and every way the processes can disagree about
//! it fails the cluster instead of leaving someone waiting.

use super::*;

fn set(from: u32, rows: &[(u64, [i64; 2])], last: bool) -> ToShard {
    ToShard::SetRows {
        from,
        rows: rows
            .iter()
            .map(|(r, v)| (RowKey::new(0, *r), AlignedBuf::from_slice(v)))
            .collect(),
        last,
    }
}

/// A two-process shard after run 1 of [`process_script`] (both subscribed, rows 1 and 2
/// planned, row 5 generic), with the refreshes and answers of that run dropped.
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

#[test]
fn a_set_completes_once_under_every_order_the_transport_allows() {
    // Process 0 sets planned row 2 and generic row 5, then (its last) new row 7;
    // process 1 sets planned row 1.
    let sets0 = vec![
        set(0, &[(2, [20, 2]), (5, [50, 5])], false),
        set(0, &[(7, [-0, 7])], true),
    ];
    let sets1 = vec![set(1, &[(1, [10, 1])], true)];
    let after = |p: u32| {
        vec![
            ToShard::SlabFetch {
                from: p,
                epoch: 1,
                required: 1,
                want: WantedChunks::All,
            },
            ToShard::Fetch {
                from: p,
                rows: vec![(RowKey::new(0, 5), 1), (RowKey::new(0, 7), 1)],
            },
            ToShard::Leave { from: p },
        ]
    };
    let mut orders = 0;
    for sets in interleavings(&sets0, &sets1) {
        for rest in interleavings(&after(0), &after(1)) {
            orders += 1;
            let mut s = after_first_run();
            let mut out = Vec::new();
            for (i, m) in sets.iter().enumerate() {
                s.step(m.clone(), &mut out);
                let told = out
                    .iter()
                    .filter(|m| matches!(m, Envelope::Client(_, ToClient::RowsSet { shard: 0 })))
                    .count();
                assert_eq!(told, if i + 1 == sets.len() { 2 } else { 0 }, "{sets:?}");
            }
            out.clear();
            for m in rest {
                s.step(m, &mut out);
            }
            assert!(rejected(&out).is_empty(), "{out:?}");
            assert!(s.released());
            for p in 0..2u32 {
                let answers = answers_to(p, &out);
                assert!(
                    answers.contains(&"rows@1 [(5, [50, 5]), (7, [0, 7])]".to_string()),
                    "{answers:?}"
                );
                // Every refresh after a set is whole, with the rows set.
                let slabs: Vec<(Option<Vec<u32>>, Vec<i64>)> = to_clients(&out)
                    .filter(|(to, _)| *to == p)
                    .filter_map(|(_, m)| match m {
                        ToClient::SlabRows { rows, bytes, .. } => {
                            Some((rows.clone(), bytes.cast::<i64>().to_vec()))
                        }
                        _ => None,
                    })
                    .collect();
                let (row1, row2) = ([10, 1], [20, 2]);
                let want = if p == 0 {
                    vec![(None, row1.to_vec()), (None, [row2, [0, 0]].concat())]
                } else {
                    vec![(None, [0, 0].to_vec()), (None, [row2, row1].concat())]
                };
                assert_eq!(slabs, want, "process {p}");
            }
        }
    }
    assert_eq!(orders, 3 * 20);
}

#[test]
fn a_set_the_processes_disagree_on_fails_the_cluster() {
    let refused = |script: Vec<ToShard>| {
        let mut s = after_first_run();
        let mut out = Vec::new();
        for m in script {
            s.step(m, &mut out);
        }
        // Failures every process must hear of go to both.
        let reasons = rejected(&out);
        reasons.first().map(|r| {
            let to: Vec<_> = to_clients(&out)
                .filter(|(_, m)| matches!(m, ToClient::Rejected { .. }))
                .map(|(to, _)| to)
                .collect();
            (r.to_string(), to)
        })
    };
    let both = vec![0, 1];
    let ok = vec![set(0, &[(3, [1, 1])], true), set(1, &[(4, [1, 1])], true)];
    assert_eq!(refused(ok.clone()), None);
    let (why, to) = refused(vec![
        set(0, &[(3, [1, 1])], true),
        set(1, &[(3, [2, 2])], true),
    ])
    .unwrap();
    assert!(
        why.contains("row 3 of table 't' set by process 0 and by process 1"),
        "{why}"
    );
    assert_eq!(to, both);
    let (why, to) = refused(vec![set(0, &[], true), clock(1, 2, &[])]).unwrap();
    assert!(
        why.contains("process 1 sent work of the next run while process 0 sets rows"),
        "{why}"
    );
    assert_eq!(to, both);
    let (why, to) = refused(vec![clock(1, 2, &[]), set(0, &[], true)]).unwrap();
    assert!(
        why.contains("process 0 sets rows while process 1 went on to run 2"),
        "{why}"
    );
    assert_eq!(to, both);
    let gather = |from| ToShard::Gather {
        from,
        round: 1,
        values: AlignedBuf::default(),
    };
    let (why, _) = refused(vec![set(0, &[], true), gather(1)]).unwrap();
    assert!(
        why.contains("process 1 sent an all-gather while process 0 sets rows"),
        "{why}"
    );
    let (why, _) = refused(vec![gather(1), set(0, &[], true)]).unwrap();
    assert!(why.contains("while all-gather round 1 is open"), "{why}");
    let (why, to) = refused(vec![set(0, &[], true), ToShard::Leave { from: 1 }]).unwrap();
    assert!(
        why.contains("process 1 left the cluster while the others set rows"),
        "{why}"
    );
    assert_eq!(to, both);
    let (why, _) = refused(vec![set(0, &[], true), set(0, &[], true)]).unwrap();
    assert!(why.contains("after its last"), "{why}");
    let (why, _) = refused(vec![
        set(0, &[(1, [1, 1])], true),
        ToShard::RunEnd { from: 1, run: 2 },
    ])
    .unwrap();
    assert!(
        why.contains("a run's end while process 0 sets rows"),
        "{why}"
    );
    let narrow = ToShard::SetRows {
        from: 0,
        rows: vec![(RowKey::new(0, 1), AlignedBuf::from_slice(&[1i64]))],
        last: true,
    };
    let (why, _) = refused(vec![narrow]).unwrap();
    assert!(why.contains("has 8 bytes, expected 16"), "{why}");
    // Every process's last in: the set is over, and a later leave disturbs nothing.
    assert_eq!(
        refused([ok, vec![ToShard::Leave { from: 1 }]].concat()),
        None
    );
}

#[test]
fn a_set_waits_for_no_pending_update_and_no_resume_follows_it() {
    // One process, one worker: an update of clock 2 still pending (the worker is at 1).
    let mut s = shard_with_table(1);
    let mut out = Vec::new();
    s.step(clock(0, 1, &[(1, [1, 1])]), &mut out);
    s.step(set(0, &[], true), &mut out);
    // The worker's clock 1 was work of the run: it sets while it runs.
    assert!(rejected(&out)[0].contains("went on to run 1"), "{out:?}");
    // Between runs, a set, then a resume: refused.
    let mut s = shard_between_runs();
    let mut out = Vec::new();
    s.step(set(0, &[(4, [7, 7])], true), &mut out);
    assert!(rejected(&out).is_empty(), "{out:?}");
    s.step(
        ToShard::Restore {
            from: 0,
            clock: 2,
            rows: vec![],
            states: vec![],
            last: true,
        },
        &mut out,
    );
    assert!(rejected(&out)[0].contains("set rows"), "{out:?}");
}
