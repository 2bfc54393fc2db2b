//! A custom app with a virtual iteration: sparse linear regression by SGD, where each
//! sample touches a handful of the model's 1,000 rows — the kind of repeating, sparse
//! access pattern the store specializes itself to. It shows:
//!
//! - the virtual iteration run through the app's own iteration code
//!   (`virtual_iteration_with`), with the arithmetic skipped under `is_virtual()` so that
//!   recording the pattern costs only the accesses;
//! - per-worker state kept across runs (`run_with`: each worker's running loss);
//! - the statistics that say the specialization was taken (every access on the tape).
//!
//! ```sh
//! cargo run --release --example custom_app
//! ```

use iterstore::{Cluster, Config, Mode, Table, Worker};

const FEATURES: u64 = 1000;
const PER_SAMPLE: usize = 5;
const SAMPLES: usize = 4000;
const BATCH: usize = 200;

/// A sample: its features (row ids) and its target.
type Sample = ([u64; PER_SAMPLE], f32);

/// Samples whose target is the sum of hidden weights `sin(feature)` of their features.
fn samples() -> Vec<Sample> {
    let mut x: u64 = 12345;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..SAMPLES)
        .map(|_| {
            let features = [(); PER_SAMPLE].map(|()| next() % FEATURES);
            let target = features.iter().map(|&f| (f as f32).sin()).sum();
            (features, target)
        })
        .collect()
}

/// One epoch of worker `w` over its share of the samples (every `workers`-th), one CLOCK
/// per mini-batch; adds its squared error to `loss`.
fn epoch(
    w: &mut Worker<'_>,
    loss: &mut f64,
    model: &Table<f32>,
    data: &[Sample],
) -> iterstore::Result<()> {
    let (me, workers) = (w.id(), w.workers());
    *loss = 0.0;
    for batch in data.chunks(BATCH) {
        for (features, target) in batch.iter().skip(me).step_by(workers) {
            let mut weights = [0.0f32; PER_SAMPLE];
            for (f, weight) in features.iter().zip(&mut weights) {
                let mut row = [0.0f32];
                w.read(model, *f, &mut row)?;
                *weight = row[0];
            }
            if w.is_virtual() {
                // Only which rows are touched matters here: skip the arithmetic, and
                // touch the same rows as the real iteration does.
                for f in features {
                    w.update(model, *f, &[0.0])?;
                }
                continue;
            }
            let err = weights.iter().sum::<f32>() - target;
            *loss += f64::from(err * err);
            for f in features {
                w.update(model, *f, &[-0.05 * err])?;
            }
        }
        w.clock()?;
    }
    Ok(())
}

fn main() -> iterstore::Result<()> {
    let data = samples();
    let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::Virtual))?;
    let model = cluster.create_table::<f32>("model", 1)?;
    // Each worker's squared error of its last epoch.
    let mut losses = vec![0.0f64; cluster.config().workers];
    let iteration = |w: &mut Worker<'_>, loss: &mut f64| epoch(w, loss, &model, &data);
    let pattern = cluster.virtual_iteration_with(&losses, iteration)?;
    println!(
        "virtual iteration: {} workers, {} clocks, {} accesses to {} rows",
        pattern.workers(),
        pattern.clocks(),
        pattern.accesses(),
        pattern.rows().len()
    );
    let mut first = None;
    for e in 1..=10 {
        cluster.run_with(&mut losses, iteration)?;
        let rmse = (losses.iter().sum::<f64>() / SAMPLES as f64).sqrt();
        first.get_or_insert(rmse);
        println!("epoch {e}: training RMSE {rmse:.4}");
    }
    let stats = cluster.stats();
    println!(
        "accesses: {} through the tape, {} indexed (off the pattern)",
        stats.tape_accesses, stats.indexed_accesses
    );
    cluster.shutdown()?;
    let last = (losses.iter().sum::<f64>() / SAMPLES as f64).sqrt();
    assert!(
        last < first.unwrap_or(f64::MAX) / 2.0,
        "the model did not learn: {last}"
    );
    assert_eq!(
        stats.indexed_accesses, 0,
        "an access left the recorded pattern"
    );
    Ok(())
}
