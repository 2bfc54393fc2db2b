//! Shared helpers: configurations for every store mode, the fixture paths, and comparing
//! results.

use std::path::PathBuf;

use iterstore::{Mode, Staleness};
use iterstore_apps::AppConfig;

/// Every store mode.
pub const MODES: [Mode; 3] = [Mode::Generic, Mode::FirstIter, Mode::Virtual];

/// A BSP configuration with one shard.
pub fn bsp(mode: Mode, workers: usize, iterations: usize) -> AppConfig {
    AppConfig {
        workers,
        shards: 1,
        staleness: Staleness::BSP,
        mode,
        iterations,
        ..AppConfig::default()
    }
}

/// A file under `tests/fixtures`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The largest element-wise absolute difference.
pub fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}
