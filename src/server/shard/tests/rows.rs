//! The rows side: plans, slabs, refreshes (sent, or written into the arena of the
//! process in the shard's OS process).

use super::*;

#[test]
fn a_clock_refresh_ships_only_the_chunks_read_in_that_clock() {
    let mut s = shard_with_table(1);
    let mut out = Vec::new();
    let specialize = ToShard::Specialize {
        from: 0,
        epoch: 1,
        keys: (0..4).map(|r| RowKey::new(0, r)).collect(),
        chunk_ends: vec![1, 2, 3, 4],
        // Chunk 0 is read in clock 0, chunk 1 in clock 1, chunk 2 in both, chunk 3
        // never (its rows are only updated).
        chunk_phases: vec![0b01, 0b10, 0b11, 0],
        updaters: vec![],
    };
    s.step(specialize, &mut out);
    let chunks_for = |s: &mut Shard, want| {
        let mut out = Vec::new();
        let msg = ToShard::SlabFetch {
            from: 0,
            epoch: 1,
            required: 0,
            want,
        };
        s.step(msg, &mut out);
        let chunks = to_clients(&out).filter_map(|(_, m)| match m {
            ToClient::SlabRows { chunk, .. } => Some(*chunk),
            _ => None,
        });
        chunks.collect::<Vec<_>>()
    };
    assert_eq!(chunks_for(&mut s, WantedChunks::Phase(0)), [0, 2]);
    assert_eq!(chunks_for(&mut s, WantedChunks::Phase(1)), [1, 2]);
    assert_eq!(
        chunks_for(&mut s, WantedChunks::Phase(65)),
        [1, 2],
        "clocks wrap at 64"
    );
    assert!(chunks_for(&mut s, WantedChunks::Phase(2)).is_empty());
    assert_eq!(chunks_for(&mut s, WantedChunks::Chunk(3)), [3]);
    assert_eq!(chunks_for(&mut s, WantedChunks::All), [0, 1, 2, 3]);
    let bad = ToShard::Specialize {
        from: 0,
        epoch: 2,
        keys: vec![RowKey::new(0, 0)],
        chunk_ends: vec![1],
        chunk_phases: vec![],
        updaters: vec![],
    };
    s.step(bad, &mut out);
    assert!(
        out.iter().any(|m| matches!(m, Envelope::Client(_, ToClient::Rejected { reason, .. }) if reason.contains("0 chunk phases for 1 chunks"))),
        "{out:?}"
    );
}

/// A [`LocalArena`] that records the refreshes written to it as [`answers_to`]
/// formats a `SlabRows`, with the changed rows' positions.
#[derive(Default)]
struct Written(std::sync::Mutex<Vec<String>>);

impl LocalArena for Written {
    fn write_refresh(
        &self,
        _shard: ShardId,
        epoch: u32,
        chunk: u32,
        data_clock: Clock,
        rows: &crate::server::RefreshRows<'_>,
    ) {
        let words: Vec<u64> = rows.slices().flatten().copied().collect();
        assert_eq!(words.len(), rows.words());
        let values: &[i64] = bytemuck::cast_slice(&words);
        let at = rows.positions().map(<[u32]>::to_vec);
        let line = format!("slab {epoch}/{chunk}@{data_clock} {values:?} at {at:?}");
        self.0.lock().unwrap().push(line);
    }
}

/// [`answers_to`], with the positions of a `SlabRows`' changed rows.
fn answers_with_rows(p: u32, out: &[Envelope]) -> Vec<String> {
    let mut v: Vec<String> = answers_to(p, out)
        .into_iter()
        .filter(|a| !a.starts_with("slab "))
        .collect();
    for (to, m) in to_clients(out) {
        if let (
            true,
            ToClient::SlabRows {
                epoch,
                chunk,
                data_clock,
                rows,
                bytes,
                ..
            },
        ) = (to == p, m)
        {
            let values = bytes.cast::<i64>();
            v.push(format!(
                "slab {epoch}/{chunk}@{data_clock} {values:?} at {rows:?}"
            ));
        }
    }
    v.sort();
    v
}

#[test]
fn a_process_in_the_shards_os_process_gets_the_same_refreshes_written_not_sent() {
    let world = two_process_world();
    let ((b0, a0), (b1, a1)) = (process_script(0), process_script(1));
    let mut orders = 0;
    for before in interleavings(&b0, &b1) {
        for after in interleavings(&a0, &a1) {
            orders += 1;
            // The same messages to a shard sending every refresh, and to one writing
            // process 0's into its arena.
            let written = Arc::new(Written::default());
            let local: Weak<dyn LocalArena> = Arc::downgrade(&written) as _;
            let mut sent = (Shard::new(0, world), Vec::new());
            let mut direct = (Shard::new(0, world).with_local_arena(0, local), Vec::new());
            for m in before.iter().chain(&after) {
                sent.0.step(m.clone(), &mut sent.1);
                direct.0.step(m.clone(), &mut direct.1);
            }
            let slabs_to = |p: u32, out: &[Envelope]| {
                to_clients(out)
                    .filter(|(to, _)| *to == p)
                    .filter(|(_, m)| matches!(m, ToClient::SlabRows { .. }))
                    .count()
            };
            assert_eq!(
                slabs_to(0, &direct.1),
                0,
                "process 0's refreshes are written"
            );
            assert!(slabs_to(0, &sent.1) > 0);
            // Process 1 (another OS process) is sent the same as before.
            assert_eq!(
                answers_with_rows(1, &direct.1),
                answers_with_rows(1, &sent.1)
            );
            // Process 0 gets the same answers, its refreshes through its arena.
            let mut got = answers_with_rows(0, &direct.1);
            got.extend(written.0.lock().unwrap().drain(..));
            got.sort();
            assert_eq!(got, answers_with_rows(0, &sent.1));
        }
    }
    assert_eq!(orders, 924 * 6);
}

#[test]
fn a_local_arena_that_is_gone_gets_its_refreshes_sent() {
    let world = two_process_world();
    let ((b0, a0), (b1, a1)) = (process_script(0), process_script(1));
    let gone: Weak<dyn LocalArena> = Arc::downgrade(&Arc::new(Written::default())) as _;
    let mut s = Shard::new(0, world).with_local_arena(0, gone);
    let mut out = Vec::new();
    for m in b0.iter().chain(&b1).chain(&a0).chain(&a1) {
        s.step(m.clone(), &mut out);
    }
    assert!(to_clients(&out).any(|(to, m)| to == 0 && matches!(m, ToClient::SlabRows { .. })));
}

#[test]
fn slabs_of_a_plan_the_shard_does_not_hold_and_clock_regressions_are_rejected() {
    let mut s = shard_with_table(1);
    let mut out = Vec::new();
    let slab = |epoch| ToShard::Clock {
        worker: 0,
        clock: 1,
        epoch,
        rows: Vec::new(),
        outer: Vec::new(),
        slab: AlignedBuf::from_slice(&[1i64, 1]),
        slab_rows: None,
    };
    s.step(slab(1), &mut out);
    assert!(
        matches!(&out[0], Envelope::Client(_, ToClient::Rejected { reason, .. }) if reason.contains("before process 0 sent any plan")),
        "{out:?}"
    );
    out.clear();
    s.step(clock(0, 1, &[]), &mut out);
    assert!(
        matches!(&out[0], Envelope::Client(_, ToClient::Rejected { reason, .. }) if reason.contains("worker 0 sent clock 1 after clock 1")),
        "{out:?}"
    );
}

/// A sparse slab (the touched rows and their positions in the worker's layout) adds
/// to those rows only; a position beyond the layout is a protocol error that changes
/// nothing but still counts the clock.
#[test]
fn sparse_slabs_add_to_their_rows_and_bad_positions_are_rejected() {
    let mut s = shard_with_table(1);
    let mut out = Vec::new();
    let key = |r: u64| RowKey::new(0, r);
    s.step(ToShard::CreateTable { meta: table_t() }, &mut out);
    s.step(
        ToShard::Specialize {
            from: 0,
            epoch: 1,
            keys: vec![key(1), key(2), key(3)],
            chunk_ends: vec![3],
            chunk_phases: vec![u64::MAX],
            updaters: vec![(0, vec![0, 1, 2])],
        },
        &mut out,
    );
    let sparse = |clock, positions: Vec<u32>, values: &[i64]| ToShard::Clock {
        worker: 0,
        clock,
        epoch: 1,
        rows: Vec::new(),
        outer: Vec::new(),
        slab: AlignedBuf::from_slice(values),
        slab_rows: Some(positions),
    };
    out.clear();
    s.step(sparse(1, vec![0, 2], &[1, 2, 5, 6]), &mut out);
    assert!(
        !out.iter()
            .any(|m| matches!(m, Envelope::Client(_, ToClient::Rejected { .. }))),
        "{out:?}"
    );
    s.step(sparse(2, vec![1, 3], &[7, 7, 9, 9]), &mut out);
    let rejected: Vec<&String> = to_clients(&out)
        .filter_map(|(_, m)| match m {
            ToClient::Rejected { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(rejected.len(), 1, "{out:?}");
    assert!(
        rejected[0].contains("names row 3 of a layout of 3"),
        "{}",
        rejected[0]
    );
    out.clear();
    s.step(
        ToShard::SlabFetch {
            from: 0,
            epoch: 1,
            required: 2,
            want: WantedChunks::All,
        },
        &mut out,
    );
    let whole: Vec<i64> = to_clients(&out)
        .find_map(|(_, m)| match m {
            ToClient::SlabRows {
                bytes, rows: None, ..
            } => Some(bytes.cast::<i64>().to_vec()),
            _ => None,
        })
        .expect("the chunk");
    assert_eq!(
        whole,
        [1, 2, 0, 0, 5, 6],
        "clock 2's bad slab added nothing"
    );
}
