//! Replays the corpora of the wire fuzz targets (`fuzz/corpus/<target>/`) through the same
//! checks the targets run (`iterstore::fuzzing`), so every input a campaign kept, and
//! every crash it found, stays covered by the stable `cargo test`.

use std::path::Path;

/// Replays `fuzz/corpus/<target>` through `check`.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    iterstore::fuzzing::replay(&dir, check);
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
