//! Checkpoints through the driver: a shard's part written to a checkpoint directory, a
//! checkpoint out of place, a failed write (answered, not a protocol error), the same
//! bytes whatever else is handled around it.

use super::Step;
use crate::ids::{Clock, ProcessId, RowKey};
use crate::msg::{Envelope, ToClient, ToShard};
use crate::rows_part;
use crate::server::shard::tests::{
    clock, decode_part, interleavings, rejected, shard_between_runs, shard_in, to_clients,
    two_process_world,
};
use std::path::Path;

/// A fresh directory under the system's temporary directory, removed when dropped.
struct TestDir(std::path::PathBuf);

impl TestDir {
    fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("iterstore-shard-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TestDir(dir)
    }

    /// The root, with the directory of the checkpoint at `clock` begun in it.
    fn begun(&self, clock: Clock) -> &Path {
        let dir = self.0.join(crate::checkpoint::dir_name(clock));
        std::fs::create_dir_all(dir).unwrap();
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn checkpointed(out: &[Envelope]) -> Vec<(ProcessId, crate::msg::ShardPart)> {
    to_clients(out)
        .filter_map(|(to, m)| match m {
            ToClient::Checkpointed { part, .. } => Some((to, part.clone())),
            _ => None,
        })
        .collect()
}

/// The rows of a rows part, as `(row, values)` of table 0 (`i64` pairs).
fn rows_in(path: &Path) -> (rows_part::Header, Vec<(u64, Vec<i64>)>) {
    decode_part(&std::fs::read(path).unwrap())
}

#[test]
fn a_checkpoint_writes_generic_and_arena_rows_sorted_without_zero_rows() {
    let dir = TestDir::new("rows");
    // Rows 4 and 2 the generic way, rows 3 and 9 planned (9 is never updated).
    let mut s = shard_between_runs();
    let mut out = Vec::new();
    let root = dir.begun(2).to_path_buf();
    s.step(
        ToShard::Checkpoint {
            from: 0,
            root: root.clone(),
            clock: 2,
        },
        &mut out,
    );
    let answers = checkpointed(&out);
    assert_eq!(answers.len(), 1, "{out:?}");
    let (name, size, _) = answers[0].1.clone().unwrap();
    assert_eq!((answers[0].0, name.as_str()), (0, "shard-0.rows"));
    let path = root.join("ckpt-00000002/shard-0.rows");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
    let (header, rows) = rows_in(&path);
    assert_eq!((header.shard, header.clock, header.rows), (0, 2, 3));
    assert_eq!(
        rows,
        vec![(2, vec![3, 4]), (3, vec![5, 6]), (4, vec![1, 2])]
    );
}

#[test]
fn a_checkpoint_out_of_place_is_a_protocol_error_and_a_failed_write_is_not() {
    let dir = TestDir::new("refused");
    let root = dir.begun(1).to_path_buf();
    let ask = |from, clock| ToShard::Checkpoint {
        from,
        root: root.clone(),
        clock,
    };
    // Shard 0 of two processes: worker 0 has sent clock 1, worker 1 has not.
    let mut s = shard_in(0, two_process_world());
    let mut out = Vec::new();
    s.step(ask(1, 0), &mut out);
    assert!(
        rejected(&out)[0].contains("process 1 asked shard 0"),
        "{out:?}"
    );
    out.clear();
    s.step(clock(0, 1, &[(1, [1, 1])]), &mut out);
    s.step(ask(0, 0), &mut out);
    assert!(
        rejected(&out)[0].contains("while updates are pending"),
        "{out:?}"
    );
    out.clear();
    s.step(clock(1, 1, &[]), &mut out);
    s.step(ask(0, 0), &mut out);
    assert!(rejected(&out)[0].contains("clocks 1 to 1"), "{out:?}");
    out.clear();
    s.step(ToShard::Finish { worker: 0 }, &mut out);
    s.step(ToShard::RunEnd { from: 0, run: 1 }, &mut out);
    s.step(ask(0, 1), &mut out);
    assert!(
        rejected(&out)[0].contains("process 0 is ending run 1"),
        "{out:?}"
    );
    out.clear();
    s.step(ToShard::Finish { worker: 1 }, &mut out);
    s.step(ToShard::RunEnd { from: 1, run: 1 }, &mut out);
    out.clear();
    // In place, but not begun: the write fails and says where; the cluster goes on.
    s.step(ask(0, 7), &mut out);
    assert!(rejected(&out)[0].contains("clocks 1 to 1"), "{out:?}");
    out.clear();
    let elsewhere = ToShard::Checkpoint {
        from: 0,
        root: root.join("missing"),
        clock: 1,
    };
    s.step(elsewhere, &mut out);
    let answers = checkpointed(&out);
    let err = answers[0].1.clone().unwrap_err();
    assert!(
        err.contains("missing/ckpt-00000001") && err.contains("does not exist"),
        "{err}"
    );
    assert!(rejected(&out).is_empty());
    out.clear();
    s.step(ask(0, 1), &mut out);
    assert!(checkpointed(&out)[0].1.is_ok(), "{out:?}");
}

#[test]
fn a_checkpoint_writes_the_same_bytes_whatever_the_other_process_sends_around_it() {
    let dir = TestDir::new("orders");
    let root = dir.begun(1).to_path_buf();
    let key = |r| RowKey::new(0, r);
    let mine = vec![ToShard::Checkpoint {
        from: 0,
        root: root.clone(),
        clock: 1,
    }];
    // Between runs the other process may read and dump; then it leaves.
    let theirs = vec![
        ToShard::Fetch {
            from: 1,
            rows: vec![(key(7), 1), (key(1), 1)],
        },
        ToShard::Dump {
            from: 1,
            table: 0,
            backup: None,
        },
        ToShard::Leave { from: 1 },
    ];
    let mut sums = Vec::new();
    for order in interleavings(&mine, &theirs) {
        let mut s = shard_in(0, two_process_world());
        let mut out = Vec::new();
        s.step(clock(0, 1, &[(1, [1, 2])]), &mut out);
        s.step(clock(1, 1, &[(1, [10, 20]), (5, [0, 0])]), &mut out);
        for p in 0..2 {
            s.step(ToShard::Finish { worker: p }, &mut out);
            s.step(ToShard::RunEnd { from: p, run: 1 }, &mut out);
        }
        out.clear();
        for m in order {
            s.step(m, &mut out);
        }
        assert!(rejected(&out).is_empty(), "{out:?}");
        let answers = checkpointed(&out);
        assert_eq!(answers.len(), 1);
        sums.push(answers[0].1.clone().unwrap());
        let (_, rows) = rows_in(&root.join("ckpt-00000001/shard-0.rows"));
        // Row 5 is all zeros and row 7 was only read: neither is written.
        assert_eq!(rows, vec![(1, vec![11, 22])]);
    }
    assert_eq!(sums.len(), 4);
    assert!(sums.iter().all(|s| *s == sums[0]), "{sums:?}");
}
