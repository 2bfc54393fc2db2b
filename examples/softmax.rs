//! A small model of your own on the store: softmax regression on three Gaussian blobs,
//! 2 worker threads, BSP, specialized by a virtual iteration.
//!
//! ```sh
//! cargo run --release --example softmax
//! ```

#[path = "common/softmax.rs"]
mod softmax;

use iterstore::{Cluster, Config, Mode};

fn main() -> iterstore::Result<()> {
    let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::Virtual))?;
    let (weights, accuracy) = softmax::train(&mut cluster, 5)?;
    let stats = cluster.stats();
    println!(
        "softmax regression, 2 workers: training accuracy {:.1} %",
        accuracy * 100.0
    );
    println!("weights (class rows, bias last): {weights:.3?}");
    println!(
        "accesses through the specialized tape: {}, indexed (off the pattern): {}",
        stats.tape_accesses, stats.indexed_accesses
    );
    cluster.shutdown()?;
    assert!(accuracy > 0.9, "the blobs are separable: {accuracy}");
    Ok(())
}
