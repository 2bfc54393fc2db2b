//! Replays the corpora of the loader fuzz targets (`fuzz/corpus/load_*/` at the repository
//! root) through the same checks the targets run (`iterstore_data::fuzzing`), so every
//! input a campaign kept, and every crash it found, stays covered by the stable
//! `cargo test`.

use std::path::Path;

/// Replays `fuzz/corpus/<target>` through `check`.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    ::iterstore::fuzzing::replay(&dir, check);
}

#[test]
fn load_ratings() {
    replay("load_ratings", iterstore_data::fuzzing::ratings);
}

#[test]
fn load_corpus() {
    replay("load_corpus", iterstore_data::fuzzing::corpus);
}

#[test]
fn load_edges() {
    replay("load_edges", iterstore_data::fuzzing::edges);
}

#[test]
fn load_graph_tool() {
    replay("load_graph_tool", iterstore_data::fuzzing::graph_tool);
}

#[test]
fn load_idx() {
    replay("load_idx", iterstore_data::fuzzing::idx);
}

#[test]
fn load_svmlight() {
    replay("load_svmlight", iterstore_data::fuzzing::svmlight);
}
