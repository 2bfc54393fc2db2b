//! Replays the corpora of the loader fuzz targets (`fuzz/corpus/load_*/` at the repository
//! root) through the same checks the targets run (`iterstore_apps::fuzzing`), so every
//! input a campaign kept, and every crash it found, stays covered by the stable
//! `cargo test`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// Runs `check` on every file of `fuzz/corpus/<target>`; fails naming each input that
/// panicked, and if the corpus is missing or empty.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
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
fn load_ratings() {
    replay("load_ratings", iterstore_apps::fuzzing::ratings);
}

#[test]
fn load_corpus() {
    replay("load_corpus", iterstore_apps::fuzzing::corpus);
}

#[test]
fn load_edges() {
    replay("load_edges", iterstore_apps::fuzzing::edges);
}

#[test]
fn load_graph_tool() {
    replay("load_graph_tool", iterstore_apps::fuzzing::graph_tool);
}
