//! Server functions at the shard: a call from the shard's own process runs on its rows
//! and is answered, in every order the transport allows beside the all-gather that
//! follows it; a write makes the next refresh whole; a call from another process, or
//! once work of the next run has come, fails the cluster.

use super::*;
use crate::placement::Placement;
use crate::server::functions::{Functions, Reduce, Registered};

/// Table 0 as the handle a function captures (`i64` × 2, any row).
fn handle() -> crate::table::Table<i64> {
    crate::table::Table::new(0, &table_t())
}

/// A registry with `sum` (every element of table 0's rows on the shard) at id 0 and
/// `double` (each row of table 0 doubled) at id 1, calls placed on one shard.
fn functions() -> Arc<Functions> {
    let f = Arc::new(Functions::default());
    let t = handle();
    f.register(Registered {
        name: "sum".into(),
        reduce: Reduce::Sum,
        body: Arc::new(move |rows, _| {
            let (mut v, mut s) = ([0i64; 2], 0.0);
            for r in rows.rows(&t)? {
                rows.read(&t, r, &mut v)?;
                s += (v[0] + v[1]) as f64;
            }
            Ok(vec![s])
        }),
    });
    f.register(Registered {
        name: "double".into(),
        reduce: Reduce::Sum,
        body: Arc::new(move |rows, args| {
            let mut v = [0i64; 2];
            for r in rows.rows(&t)? {
                rows.read(&t, r, &mut v)?;
                rows.write(&t, r, &[v[0] * args[0] as i64, v[1] * args[0] as i64])?;
            }
            Ok(vec![])
        }),
    });
    f.set_placement(Arc::new(Placement::hashed(1)));
    f
}

/// The shard of process 0 of a two-process world after [`process_script`]'s first run
/// (rows 1 and 2 planned, row 5 generic), running `functions`.
fn shard_of_process_0() -> Shard {
    let (b0, _) = process_script(0);
    let (b1, _) = process_script(1);
    let local: Weak<dyn LocalArena> = Weak::<NoArena>::new();
    let mut s = Shard::new(0, two_process_world())
        .with_local_arena(0, local)
        .with_functions(functions());
    let mut out = Vec::new();
    for m in b0.into_iter().chain(b1) {
        s.step(m, &mut out);
    }
    assert!(rejected(&out).is_empty(), "{out:?}");
    s
}

/// A local arena that is never there (refreshes are sent).
struct NoArena;

impl LocalArena for NoArena {
    fn write_refresh(
        &self,
        _: ShardId,
        _: u32,
        _: u32,
        _: Clock,
        _: &crate::server::RefreshRows<'_>,
    ) {
    }
}

fn call(from: ProcessId, function: u32, args: &[f64]) -> ToShard {
    ToShard::Call {
        from,
        function,
        args: args.to_vec(),
    }
}

fn called(out: &[Envelope]) -> Vec<(ProcessId, crate::msg::Called)> {
    to_clients(out)
        .filter_map(|(to, m)| match m {
            ToClient::Called { called } => Some((to, called.clone())),
            _ => None,
        })
        .collect()
}

fn gather(from: ProcessId) -> ToShard {
    ToShard::Gather {
        from,
        round: 1,
        values: AlignedBuf::from_slice(&[i64::from(from)]),
    }
}

#[test]
fn a_call_is_answered_beside_its_all_gather_in_every_order() {
    // Process 0 calls its shard, then (once answered) sends its part of the all-gather;
    // process 1's part may come at any point.
    let mut orders = 0;
    for order in interleavings(&[call(0, 0, &[]), gather(0)], &[gather(1)]) {
        orders += 1;
        let mut s = shard_of_process_0();
        let mut out = Vec::new();
        let sum_before = {
            s.step(call(0, 0, &[]), &mut out);
            let c = called(&out);
            out.clear();
            c[0].1.result.clone().unwrap()[0]
        };
        for m in order {
            s.step(m, &mut out);
        }
        assert!(rejected(&out).is_empty(), "{out:?}");
        let answers = called(&out);
        assert_eq!(answers.len(), 1, "{out:?}");
        let (to, c) = &answers[0];
        assert_eq!((*to, c.shard, c.wrote), (0, 0, false));
        assert_eq!(c.result, Ok(vec![sum_before]));
        let gathered = to_clients(&out)
            .filter(|(_, m)| matches!(m, ToClient::Gathered { .. }))
            .count();
        assert_eq!(gathered, 2, "{out:?}");
    }
    assert_eq!(orders, 3);
}

#[test]
fn a_write_is_read_back_and_makes_the_next_refresh_whole() {
    let mut s = shard_of_process_0();
    let mut out = Vec::new();
    s.step(call(0, 0, &[]), &mut out);
    let before = called(&out)[0].1.result.clone().unwrap()[0];
    out.clear();
    s.step(call(0, 1, &[3.0]), &mut out);
    let c = &called(&out)[0].1;
    assert_eq!((c.wrote, c.result.clone()), (true, Ok(vec![])));
    out.clear();
    s.step(call(0, 0, &[]), &mut out);
    assert_eq!(called(&out)[0].1.result, Ok(vec![before * 3.0]));
    // Process 1's arena gets the planned rows whole, not as changed rows.
    out.clear();
    s.step(
        ToShard::SlabFetch {
            from: 1,
            epoch: 1,
            required: 1,
            want: WantedChunks::All,
        },
        &mut out,
    );
    let partial =
        to_clients(&out).any(|(_, m)| matches!(m, ToClient::SlabRows { rows: Some(_), .. }));
    let whole = to_clients(&out).any(|(_, m)| matches!(m, ToClient::SlabRows { rows: None, .. }));
    assert!(whole && !partial, "{out:?}");
}

#[test]
fn a_call_from_another_process_or_during_the_next_run_fails_the_cluster() {
    let mut s = shard_of_process_0();
    let mut out = Vec::new();
    s.step(call(1, 0, &[]), &mut out);
    assert!(
        rejected(&out)
            .iter()
            .any(|r| r.contains("which is not its own")),
        "{out:?}"
    );
    let mut s = shard_of_process_0();
    let mut out = Vec::new();
    s.step(clock(1, 2, &[]), &mut out);
    s.step(call(0, 0, &[]), &mut out);
    assert!(
        rejected(&out)
            .iter()
            .any(|r| r.contains("while process 1 went on to run 2")),
        "{out:?}"
    );
    assert!(called(&out).is_empty());
}

#[test]
fn a_function_that_fails_is_answered_with_its_error() {
    let f = functions();
    f.register(Registered {
        name: "fails".into(),
        reduce: Reduce::Sum,
        body: Arc::new(|_, _| panic!("no")),
    });
    let mut s = shard_of_process_0();
    s.functions = Some(f);
    let mut out = Vec::new();
    s.step(call(0, 2, &[]), &mut out);
    s.step(call(0, 7, &[]), &mut out);
    let answers: Vec<_> = called(&out).into_iter().map(|(_, c)| c.result).collect();
    assert_eq!(
        answers,
        [
            Err("panicked: no".to_string()),
            Err("no server function #7 is registered".to_string())
        ]
    );
    assert!(rejected(&out).is_empty());
}
