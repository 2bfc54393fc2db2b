//! A softmax regression trained data-parallel through the store, shared by the
//! `softmax` and `launch` examples: `CLASSES` rows of `FEATURES + 1` weights (a bias
//! last); each worker takes its share of every mini-batch, READs the rows, computes the
//! gradient of the cross-entropy, UPDATEs the rows by `-lr x gradient` and CLOCKs.

use iterstore::{Cluster, Table, Worker};

/// Classes, features per sample, samples, samples per mini-batch (over all workers).
pub const CLASSES: usize = 3;
pub const FEATURES: usize = 2;
pub const SAMPLES: usize = 3000;
pub const BATCH: usize = 300;
const WIDTH: usize = FEATURES + 1;

/// Three Gaussian blobs, one per class, from a fixed seed: `(features, class)`.
pub fn data() -> Vec<([f32; FEATURES], usize)> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut uniform = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f32 / (1u64 << 53) as f32
    };
    let centres = [[-2.0f32, 0.0], [2.0, 0.0], [0.0, 2.5]];
    (0..SAMPLES)
        .map(|i| {
            let c = i % CLASSES;
            // A sum of uniforms is close enough to a Gaussian for blobs.
            let mut noise = || (0..4).map(|_| uniform()).sum::<f32>() - 2.0;
            ([centres[c][0] + noise(), centres[c][1] + noise()], c)
        })
        .collect()
}

/// Class probabilities of `x` under weights `w` (row per class).
fn softmax(w: &[[f32; WIDTH]; CLASSES], x: &[f32; FEATURES]) -> [f32; CLASSES] {
    let mut z = [0.0f32; CLASSES];
    for (zc, wc) in z.iter_mut().zip(w) {
        *zc = wc[FEATURES]
            + wc[..FEATURES]
                .iter()
                .zip(x)
                .map(|(a, b)| a * b)
                .sum::<f32>();
    }
    let max = z.iter().copied().fold(f32::MIN, f32::max);
    let sum: f32 = z.iter().map(|v| (v - max).exp()).sum();
    z.map(|v| (v - max).exp() / sum)
}

/// One epoch on worker `w` of `workers` (global ids; every process's workers together):
/// a CLOCK per mini-batch. In the virtual iteration only the accesses matter, so the
/// arithmetic is skipped (`is_virtual`): it would run on zeros and cost a real epoch.
pub fn epoch(
    w: &mut Worker<'_>,
    table: &Table<f32>,
    data: &[([f32; FEATURES], usize)],
    lr: f32,
) -> iterstore::Result<()> {
    let (me, workers) = (w.id(), w.workers());
    let mut weights = [[0.0f32; WIDTH]; CLASSES];
    for batch in data.chunks(BATCH) {
        for (c, row) in weights.iter_mut().enumerate() {
            w.read(table, c as u64, row)?;
        }
        let mut grad = [[0.0f32; WIDTH]; CLASSES];
        if !w.is_virtual() {
            // This worker's share of the batch: every `workers`-th sample.
            for (x, label) in batch.iter().skip(me).step_by(workers) {
                let p = softmax(&weights, x);
                for c in 0..CLASSES {
                    let err = p[c] - f32::from(u8::from(c == *label));
                    for f in 0..FEATURES {
                        grad[c][f] += err * x[f];
                    }
                    grad[c][FEATURES] += err;
                }
            }
        }
        for (c, g) in grad.iter().enumerate() {
            let delta = g.map(|v| -lr * v / batch.len() as f32);
            w.update(table, c as u64, &delta)?;
        }
        w.clock()?;
    }
    Ok(())
}

/// Trains for `epochs` on `cluster` (every process calls it alike) and returns the
/// weights and the training accuracy.
pub fn train(cluster: &mut Cluster, epochs: usize) -> iterstore::Result<(Vec<f32>, f64)> {
    let data = data();
    let table = cluster.create_table::<f32>("softmax.weights", WIDTH)?;
    let lr = 0.5;
    if cluster.config().mode == iterstore::Mode::Virtual {
        cluster.virtual_iteration(|w| epoch(w, &table, &data, lr))?;
    }
    for _ in 0..epochs {
        cluster.run(|w| epoch(w, &table, &data, lr))?;
    }
    let mut weights = [[0.0f32; WIDTH]; CLASSES];
    for (row, values) in cluster.snapshot(&table)? {
        weights[row as usize].copy_from_slice(&values);
    }
    let right = data
        .iter()
        .filter(|(x, label)| {
            let p = softmax(&weights, x);
            (0..CLASSES).max_by(|&a, &b| p[a].total_cmp(&p[b])) == Some(*label)
        })
        .count();
    Ok((weights.concat(), right as f64 / data.len() as f64))
}
