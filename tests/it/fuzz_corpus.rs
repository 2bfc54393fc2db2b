//! Replays the corpora of the wire fuzz targets (`fuzz/corpus/<target>/`) through the same
//! checks the targets run (`iterstore::fuzzing`), so every input a campaign kept, and
//! every crash it found, stays covered by the stable `cargo test`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// Runs `check` on every file of `fuzz/corpus/<target>`; fails naming each input that
/// panicked, and if the corpus is missing or empty.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut inputs = 0;
    let mut failed = Vec::new();
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        inputs += 1;
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(inputs > 0, "{}: empty corpus", dir.display());
    assert!(
        failed.is_empty(),
        "{} inputs fail: {failed:?}",
        failed.len()
    );
}

#[test]
fn frame_raw() {
    replay("frame_raw", iterstore::fuzzing::frame_raw);
}

#[test]
fn frame_roundtrip() {
    replay("frame_roundtrip", iterstore::fuzzing::frame_roundtrip);
}

#[test]
fn frame_split() {
    replay("frame_split", iterstore::fuzzing::frame_split);
}

#[test]
fn handshake() {
    replay("handshake", iterstore::fuzzing::handshake);
}
