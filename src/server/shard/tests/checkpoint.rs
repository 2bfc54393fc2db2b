//! Checkpoints on the shard's side, with no IO: the part it asks its driver to write (only
//! when the checkpoint is in place), the part's bytes, and its answer to the outcome the
//! driver hands back. Writing the part to a directory is the driver's, tested in
//! `server`'s tests.

use super::*;
use crate::checkpoint::PartEntry;
use crate::error::checkpoint::CheckpointError;
use std::path::PathBuf;

/// A root no test creates: the shard must not touch it.
fn nowhere() -> PathBuf {
    std::env::temp_dir().join(format!(
        "iterstore-shard-{}-never-created",
        std::process::id()
    ))
}

fn ask(from: ProcessId, clock: Clock) -> ToShard {
    ToShard::Checkpoint {
        from,
        root: nowhere(),
        clock,
    }
}

#[test]
fn a_checkpoint_asks_the_driver_for_its_part_and_answers_once_told_the_outcome() {
    let mut s = shard_between_runs();
    let mut out = Vec::new();
    let write = s.handle(ask(0, 2), &mut out).expect("a part to write");
    assert!(out.is_empty(), "the answer waits for the write: {out:?}");
    assert_eq!(
        (write.root(), write.clock(), write.name()),
        (nowhere().as_path(), 2, "shard-0.rows")
    );
    assert!(!nowhere().exists(), "the shard writes nothing");
    // The part's bytes: generic and arena rows, sorted by key, without all-zero rows.
    let mut bytes = Vec::new();
    s.encode_part(&write, &mut bytes).unwrap();
    let (header, rows) = decode_part(&bytes);
    assert_eq!((header.shard, header.clock, header.rows), (0, 2, 3));
    assert_eq!(
        rows,
        vec![(2, vec![3, 4]), (3, vec![5, 6]), (4, vec![1, 2])]
    );
    // Told the part's entry, it answers the process that asked with it.
    let entry = PartEntry {
        name: "shard-0.rows".into(),
        size: bytes.len() as u64,
        sha256: "ab".repeat(32),
    };
    s.part_written(write, Ok(entry.clone()), &mut out);
    let expected = Ok((entry.name, entry.size, entry.sha256));
    assert!(
        matches!(&out[..], [Envelope::Client(0, ToClient::Checkpointed { shard: 0, part })] if *part == expected),
        "{out:?}"
    );
}

#[test]
fn a_failed_write_is_answered_with_its_text_and_a_checkpoint_out_of_place_asks_for_nothing() {
    let mut s = shard_between_runs();
    let mut out = Vec::new();
    assert!(s.handle(ask(0, 1), &mut out).is_none(), "another clock");
    assert!(rejected(&out)[0].contains("clocks 2 to 2"), "{out:?}");
    out.clear();
    assert!(
        s.handle(ask(1, 2), &mut out).is_none(),
        "an unknown process"
    );
    assert!(!rejected(&out).is_empty(), "{out:?}");
    out.clear();
    let write = s.handle(ask(0, 2), &mut out).expect("a part to write");
    let failed = CheckpointError::MissingDir {
        dir: nowhere().join("ckpt-00000002"),
    };
    let text = failed.to_string();
    s.part_written(write, Err(failed), &mut out);
    assert!(rejected(&out).is_empty(), "not a protocol error: {out:?}");
    assert!(
        matches!(&out[..], [Envelope::Client(0, ToClient::Checkpointed { shard: 0, part: Err(e) })] if *e == text),
        "{out:?}"
    );
    // The shard goes on: asked again, it asks for the part again.
    out.clear();
    assert!(s.handle(ask(0, 2), &mut out).is_some());
}
