//! The limit implementation of the DNN: the MLP trained on plain `f32` arrays by
//! `threads` workers, as the store-backed app trains it under BSP.
//!
//! Worker `w` takes its share of every mini-batch from its own shuffled range of the
//! training set ([`epoch_order`], [`mini_batch`]), computes its SGD step on the weights
//! of the start of the mini-batch ([`gradient_step`], its own [`Scratch`]) and folds it
//! into its own velocity ([`add_momentum`]), all workers in parallel; then the velocities
//! are added into the weights in worker order (per weight, in parallel over row ranges of
//! each layer). That is the app's arithmetic in the app's order, so a limit run computes
//! the store's weights bit for bit, and with one thread it is [`reference()`]. Buffers live
//! for the whole run; a mini-batch allocates nothing but its scoped threads.
//!
//! It knows nothing of the parameter server; the math is [`crate::dnn`].

use std::time::Instant;

use super::{par_each, par_rows, IterStats, LimitConfig};
#[cfg(doc)]
use crate::dnn::mlp::reference;
use crate::dnn::mlp::{add_momentum, clocks, epoch_order, gradient_step, mini_batch, Scratch};
use crate::dnn::{DnnConfig, Mlp, MlpSpec};
use iterstore_data::ImageSet;

/// The outcome of a limit DNN run.
#[derive(Debug, Clone)]
pub struct DnnRun {
    /// The final weights.
    pub model: Mlp,
    /// Per epoch: training time (evaluation excluded), mean training cross-entropy.
    pub stats: Vec<IterStats>,
    /// Test accuracy after each epoch (empty without test images).
    pub test_accuracy: Vec<f64>,
}

/// One worker's buffers and state across epochs.
struct Worker {
    id: usize,
    scratch: Scratch,
    step: Vec<Vec<f32>>,
    velocity: Vec<Vec<f32>>,
    order: Vec<u32>,
    /// Summed cross-entropy of this epoch's samples so far.
    loss: f64,
}

/// Trains `cfg`'s MLP on `data` for `limit.iterations` epochs with `limit.threads`
/// workers, measuring the test accuracy after each epoch (not timed).
pub fn run(cfg: &DnnConfig, limit: &LimitConfig, data: &ImageSet) -> Result<DnnRun, String> {
    cfg.validate()?;
    limit.validate()?;
    let train = &data.train;
    if train.is_empty() || train.labels.len() != train.len() {
        return Err("dnn limit: no training images, or not one label per image".into());
    }
    if let Some(&bad) = train
        .labels
        .iter()
        .find(|&&c| usize::from(c) >= data.classes)
    {
        return Err(format!(
            "dnn limit: label {bad} is not below {} classes",
            data.classes
        ));
    }
    let spec = MlpSpec::new(train.pixels_per_image(), cfg, data.classes);
    let (n, threads) = (train.len(), limit.threads);
    let clocks = clocks(n, cfg.batch);
    let capacity = n.div_ceil(threads).div_ceil(clocks);
    let zeros = Mlp::zeros(&spec).layers;
    let mut workers: Vec<Worker> = (0..threads)
        .map(|id| Worker {
            id,
            scratch: Scratch::new(&spec, capacity),
            step: zeros.clone(),
            velocity: zeros.clone(),
            order: Vec::new(),
            loss: 0.0,
        })
        .collect();
    let mut model = Mlp::init(&spec, cfg.seed);
    let mut stats = Vec::with_capacity(limit.iterations.min(1024));
    let mut test_accuracy = Vec::with_capacity(limit.iterations.min(1024));
    for epoch in 0..limit.iterations {
        let start = Instant::now();
        let rate = cfg.rate(epoch as u64);
        for w in &mut workers {
            epoch_order(n, threads, w.id, cfg.seed, epoch as u64, &mut w.order);
            w.loss = 0.0;
        }
        for b in 0..clocks {
            let m = &model;
            par_each(&mut workers, |w| {
                let which = mini_batch(&w.order, clocks, b);
                w.loss += gradient_step(m, train, which, rate, &mut w.scratch, &mut w.step);
                add_momentum(&mut w.velocity, &w.step, cfg.momentum);
            });
            for (l, layer) in model.layers.iter_mut().enumerate() {
                let width = spec.width(l);
                let workers = &workers;
                par_rows(layer, width, threads, |first, rows| {
                    let offset = first * width;
                    for w in workers {
                        let v = &w.velocity[l][offset..offset + rows.len()];
                        for (x, &d) in rows.iter_mut().zip(v) {
                            *x += d;
                        }
                    }
                });
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        let loss: f64 = workers.iter().map(|w| w.loss).sum();
        stats.push(IterStats {
            iter: epoch,
            seconds,
            objective: loss / n as f64,
            held_out: None,
        });
        if !data.test.is_empty() {
            test_accuracy.push(model.accuracy(&data.test));
        }
    }
    Ok(DnnRun {
        model,
        stats,
        test_accuracy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dnn::mlp::reference;
    use iterstore_data::ImageSpec;

    #[test]
    fn the_limit_computes_the_reference_weights() {
        let set = ImageSpec {
            train: 150,
            test: 40,
            ..ImageSpec::preset("tiny").unwrap()
        }
        .generate();
        let cfg = DnnConfig {
            hidden: vec![16, 8],
            batch: 20,
            ..DnnConfig::default()
        };
        for threads in [1, 3] {
            let limit = LimitConfig {
                threads,
                iterations: 2,
            };
            let got = run(&cfg, &limit, &set).unwrap();
            let (want, losses) = reference(&set.train, set.classes, &cfg, threads, 2);
            assert_eq!(got.model, want, "{threads} threads");
            for (s, l) in got.stats.iter().zip(&losses) {
                assert!((s.objective - l).abs() <= 1e-9 * l.abs(), "{s:?} vs {l}");
            }
            assert_eq!(got.test_accuracy.len(), 2);
        }
    }
}
