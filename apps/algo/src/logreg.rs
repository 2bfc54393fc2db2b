//! L2-regularized multinomial logistic regression: the objective, its gradient over a
//! range of samples (a work unit), and a sequential L-BFGS that minimizes it — the
//! reference the store-backed app is held to.
//!
//! The model is `classes` rows of `features + 1` weights (the last one the class's
//! intercept). The objective is scikit-learn's with `C = 1/(λn)`:
//! `f(W) = (1/n) Σᵢ −log softmax(W·xᵢ)[yᵢ] + (λ/2)·‖W‖²` over the weights, intercepts not
//! penalized. Everything is `f64`; sums run in sample order, so a range's result does not
//! depend on who computes it.
//!
//! This module is arithmetic only: no store, no I/O.

use crate::lbfgs;
use iterstore_data::{Images, SparseSet};

/// Labeled samples a model is trained on.
pub trait Samples: Sync {
    /// How many samples.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Features per sample (the intercept not counted).
    fn features(&self) -> usize;
    /// Sample `i`'s class.
    fn label(&self, i: usize) -> usize;
    /// Calls `f(feature, value)` for each non-zero feature of sample `i`, in feature order.
    fn for_each(&self, i: usize, f: &mut dyn FnMut(usize, f64));
    /// Whether the samples are dense: [`loss_grad`] then takes its products as matrix
    /// products over [`dense_rows`](Self::dense_rows).
    fn is_dense(&self) -> bool {
        false
    }
    /// Writes the features of the samples `range` into `out`, row after row, `features()`
    /// values each (zeros included); only called when [`is_dense`](Self::is_dense).
    fn dense_rows(&self, range: std::ops::Range<usize>, out: &mut [f64]) {
        let n = self.features();
        out.fill(0.0);
        for (row, i) in out.chunks_exact_mut(n).zip(range) {
            self.for_each(i, &mut |j, v| row[j] = v);
        }
    }
}

impl Samples for Images {
    fn len(&self) -> usize {
        self.labels.len()
    }
    fn features(&self) -> usize {
        self.pixels_per_image()
    }
    fn label(&self, i: usize) -> usize {
        usize::from(self.labels[i])
    }
    fn for_each(&self, i: usize, f: &mut dyn FnMut(usize, f64)) {
        let n = self.pixels_per_image();
        for (j, &p) in self.pixels[i * n..(i + 1) * n].iter().enumerate() {
            if p != 0 {
                f(j, f64::from(p) / 255.0);
            }
        }
    }
    fn is_dense(&self) -> bool {
        true
    }
    fn dense_rows(&self, range: std::ops::Range<usize>, out: &mut [f64]) {
        let n = self.pixels_per_image();
        for (o, &p) in out
            .iter_mut()
            .zip(&self.pixels[range.start * n..range.end * n])
        {
            *o = f64::from(p) / 255.0;
        }
    }
}

impl Samples for SparseSet {
    fn len(&self) -> usize {
        self.labels.len()
    }
    fn features(&self) -> usize {
        self.features as usize
    }
    fn label(&self, i: usize) -> usize {
        self.labels[i] as usize
    }
    fn for_each(&self, i: usize, f: &mut dyn FnMut(usize, f64)) {
        let (idx, val) = self.row(i);
        for (&j, &v) in idx.iter().zip(val) {
            f(j as usize, f64::from(v));
        }
    }
}

/// The shape of a model: `classes` rows of `features + 1` weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Classes (rows).
    pub classes: usize,
    /// Features (the row width is one more: the intercept).
    pub features: usize,
}

impl Shape {
    /// Weights in a row.
    pub fn width(&self) -> usize {
        self.features + 1
    }
    /// Weights in the model.
    pub fn len(&self) -> usize {
        self.classes * self.width()
    }
    /// Whether the model is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Samples per matrix product of [`loss_grad`]'s dense path.
const DENSE_BLOCK: usize = 64;

/// `Σ −log p(yᵢ|xᵢ)` over the samples `range` with weights `w`, and the gradient of that
/// sum added into `grad` (unscaled, unregularized). Returns the sum. Dense samples
/// ([`Samples::is_dense`]) are taken in blocks of 64 as two matrix products each; the
/// result depends only on the arguments (the same on every machine of one kind).
pub fn loss_grad(
    shape: Shape,
    w: &[f64],
    data: &dyn Samples,
    range: std::ops::Range<usize>,
    grad: &mut [f64],
) -> f64 {
    if data.is_dense() {
        return loss_grad_dense(shape, w, data, range, grad);
    }
    let (k, width) = (shape.classes, shape.width());
    let mut z = vec![0.0; k];
    let mut loss = 0.0;
    let mut feats: Vec<(usize, f64)> = Vec::new();
    for i in range {
        feats.clear();
        data.for_each(i, &mut |j, v| feats.push((j, v)));
        for (c, zc) in z.iter_mut().enumerate() {
            let row = &w[c * width..(c + 1) * width];
            *zc = row[shape.features] + feats.iter().map(|&(j, v)| row[j] * v).sum::<f64>();
        }
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let norm: f64 = z.iter().map(|v| (v - max).exp()).sum();
        let log_norm = max + norm.ln();
        let y = data.label(i);
        loss += log_norm - z[y];
        for (c, &zc) in z.iter().enumerate() {
            let p = (zc - log_norm).exp() - if c == y { 1.0 } else { 0.0 };
            let row = &mut grad[c * width..(c + 1) * width];
            for &(j, v) in &feats {
                row[j] += p * v;
            }
            row[shape.features] += p;
        }
    }
    loss
}

/// [`loss_grad`] of dense samples: per block, `Z = X·Wᵀ` and `G += Pᵀ·X` with `P` the
/// softmax minus the one-hot labels.
fn loss_grad_dense(
    shape: Shape,
    w: &[f64],
    data: &dyn Samples,
    range: std::ops::Range<usize>,
    grad: &mut [f64],
) -> f64 {
    let (k, f, width) = (shape.classes, shape.features, shape.width());
    assert!(w.len() >= shape.len() && grad.len() >= shape.len());
    let mut x = vec![0.0; DENSE_BLOCK * f];
    let mut z = vec![0.0; DENSE_BLOCK * k];
    let mut loss = 0.0;
    let mut start = range.start;
    while start < range.end {
        let end = (start + DENSE_BLOCK).min(range.end);
        let b = end - start;
        data.dense_rows(start..end, &mut x[..b * f]);
        // SAFETY: x holds b rows of f (row stride f), w k rows of width ≥ f read as the
        // f × k matrix Wᵀ (row stride 1, column stride width), z b rows of k; the
        // lengths were checked above and the buffers sized for DENSE_BLOCK ≥ b rows.
        unsafe {
            matrixmultiply::dgemm(
                b,
                f,
                k,
                1.0,
                x.as_ptr(),
                f as isize,
                1,
                w.as_ptr(),
                1,
                width as isize,
                0.0,
                z.as_mut_ptr(),
                k as isize,
                1,
            );
        }
        for (s, zs) in z[..b * k].chunks_exact_mut(k).enumerate() {
            for (c, zc) in zs.iter_mut().enumerate() {
                *zc += w[c * width + f];
            }
            let max = zs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let norm: f64 = zs.iter().map(|v| (v - max).exp()).sum();
            let log_norm = max + norm.ln();
            let y = data.label(start + s);
            loss += log_norm - zs[y];
            for (c, zc) in zs.iter_mut().enumerate() {
                *zc = (*zc - log_norm).exp() - if c == y { 1.0 } else { 0.0 };
                grad[c * width + f] += *zc;
            }
        }
        // SAFETY: z holds b rows of k read as the k × b matrix Pᵀ (row stride 1, column
        // stride k), x b rows of f, grad k rows of width ≥ f written at row stride width
        // (its intercept column untouched); lengths checked above.
        unsafe {
            matrixmultiply::dgemm(
                k,
                b,
                f,
                1.0,
                z.as_ptr(),
                1,
                k as isize,
                x.as_ptr(),
                f as isize,
                1,
                1.0,
                grad.as_mut_ptr(),
                width as isize,
                1,
            );
        }
        start = end;
    }
    loss
}

/// The objective and its gradient for all of `data` with regularization `lambda`.
pub fn objective(shape: Shape, w: &[f64], data: &dyn Samples, lambda: f64) -> (f64, Vec<f64>) {
    let mut g = vec![0.0; shape.len()];
    let loss = loss_grad(shape, w, data, 0..data.len(), &mut g);
    finish(shape, w, data.len(), lambda, loss, g)
}

/// The objective and gradient from the summed loss and gradient of `n` samples: scaled
/// by `1/n`, plus the regularization of the weights (not the intercepts).
pub fn finish(
    shape: Shape,
    w: &[f64],
    n: usize,
    lambda: f64,
    loss: f64,
    mut g: Vec<f64>,
) -> (f64, Vec<f64>) {
    let scale = 1.0 / n.max(1) as f64;
    let mut reg = 0.0;
    for (i, (gi, wi)) in g.iter_mut().zip(w).enumerate() {
        *gi *= scale;
        if i % shape.width() != shape.features {
            *gi += lambda * wi;
            reg += wi * wi;
        }
    }
    (loss * scale + 0.5 * lambda * reg, g)
}

/// The fraction of `data` the model `w` classifies right.
pub fn accuracy(shape: Shape, w: &[f64], data: &dyn Samples) -> f64 {
    let width = shape.width();
    let right = (0..data.len())
        .filter(|&i| {
            let mut z = vec![0.0; shape.classes];
            data.for_each(i, &mut |j, v| {
                for (c, zc) in z.iter_mut().enumerate() {
                    *zc += w[c * width + j] * v;
                }
            });
            let best = (0..shape.classes)
                .map(|c| (c, z[c] + w[c * width + shape.features]))
                .fold((0, f64::NEG_INFINITY), |b, x| if x.1 > b.1 { x } else { b });
            best.0 == data.label(i)
        })
        .count();
    right as f64 / data.len().max(1) as f64
}

/// A smooth function as [`minimize`] calls it: the objective and gradient at a point.
pub type Smooth<'a> = dyn FnMut(&[f64]) -> (f64, Vec<f64>) + 'a;

/// One L-BFGS iteration's record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The objective after the step.
    pub objective: f64,
    /// Objective evaluations the line search used.
    pub evaluations: usize,
}

/// Minimizes a smooth function with L-BFGS (history `m`), the direction from
/// [`lbfgs::direction`] on the Gram matrix of the history, and a backtracking line
/// search (Armijo, `c = 1e-4`, halving from a unit step). `f` gives the objective and
/// gradient at a point. Stops after `iterations`, or when the objective's relative
/// decrease falls under `tol`. Returns the point and a record per iteration.
pub fn minimize(
    f: &mut Smooth<'_>,
    x0: Vec<f64>,
    m: usize,
    iterations: usize,
    tol: f64,
) -> (Vec<f64>, Vec<Step>) {
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    let mut x = x0;
    let (mut fx, mut g) = f(&x);
    let (mut s_hist, mut y_hist): (Vec<Vec<f64>>, Vec<Vec<f64>>) = (Vec::new(), Vec::new());
    let mut steps = Vec::new();
    for _ in 0..iterations {
        let base: Vec<&Vec<f64>> = s_hist.iter().chain(&y_hist).chain([&g]).collect();
        let gram: Vec<f64> = base
            .iter()
            .flat_map(|p| base.iter().map(|q| dot(p, q)))
            .collect();
        let delta = lbfgs::direction(&gram, s_hist.len());
        let mut d = vec![0.0; x.len()];
        for (v, c) in base.iter().zip(&delta) {
            for (dk, vk) in d.iter_mut().zip(v.iter()) {
                *dk += c * vk;
            }
        }
        let slope = dot(&g, &d);
        if slope >= 0.0 {
            break; // not a descent direction: nothing left to gain
        }
        let (mut t, mut evaluations) = (1.0, 0);
        let (x_new, f_new, g_new) = loop {
            let trial: Vec<f64> = x.iter().zip(&d).map(|(a, b)| a + t * b).collect();
            let (ft, gt) = f(&trial);
            evaluations += 1;
            if ft <= fx + 1e-4 * t * slope || evaluations >= 40 {
                break (trial, ft, gt);
            }
            t *= 0.5;
        };
        let s: Vec<f64> = x_new.iter().zip(&x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = g_new.iter().zip(&g).map(|(a, b)| a - b).collect();
        if dot(&s, &y) > 0.0 {
            s_hist.push(s);
            y_hist.push(y);
            if s_hist.len() > m {
                s_hist.remove(0);
                y_hist.remove(0);
            }
        }
        let decrease = (fx - f_new) / fx.abs().max(1e-300);
        x = x_new;
        fx = f_new;
        g = g_new;
        steps.push(Step {
            objective: fx,
            evaluations,
        });
        if decrease < tol {
            break;
        }
    }
    (x, steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Three separable-ish clusters in 4 features.
    fn data(n: usize, seed: u64) -> SparseSet {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut s = SparseSet {
            row_starts: vec![0],
            classes: 3,
            class_labels: vec![0, 1, 2],
            features: 4,
            ..SparseSet::default()
        };
        for _ in 0..n {
            let y = rng.gen_range(0..3u32);
            for j in 0..4u32 {
                let centre = if j == y { 1.5 } else { 0.0 };
                s.indices.push(j);
                s.values.push(centre + rng.gen_range(-1.0f32..1.0));
            }
            s.labels.push(y);
            s.row_starts.push(s.indices.len() as u64);
        }
        s
    }

    #[test]
    fn the_gradient_is_the_objectives_derivative() {
        let d = data(50, 1);
        let shape = Shape {
            classes: 3,
            features: 4,
        };
        let w: Vec<f64> = (0..shape.len()).map(|i| (i as f64 * 0.37).sin()).collect();
        let (f0, g) = objective(shape, &w, &d, 0.1);
        for i in 0..shape.len() {
            let mut wp = w.clone();
            wp[i] += 1e-6;
            let (f1, _) = objective(shape, &wp, &d, 0.1);
            let numeric = (f1 - f0) / 1e-6;
            assert!(
                (numeric - g[i]).abs() < 1e-4,
                "weight {i}: {numeric} vs {}",
                g[i]
            );
        }
    }

    #[test]
    fn lbfgs_finds_the_optimum_and_classifies() {
        let d = data(400, 2);
        let shape = Shape {
            classes: 3,
            features: 4,
        };
        let lambda = 1e-3;
        let mut f = |w: &[f64]| objective(shape, w, &d, lambda);
        let (w, steps) = minimize(&mut f, vec![0.0; shape.len()], 10, 200, 1e-12);
        let (fw, g) = objective(shape, &w, &d, lambda);
        let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
        assert!(
            norm < 1e-5,
            "gradient norm {norm} after {} steps",
            steps.len()
        );
        assert!(steps.windows(2).all(|p| p[1].objective <= p[0].objective));
        assert_eq!(steps.last().unwrap().objective, fw);
        assert!(accuracy(shape, &w, &d) > 0.8);
    }

    /// The sequential reference on Fashion-MNIST against scikit-learn's figure
    /// (`tools/peer-logreg --fashion-mnist --lambda 1e-4`: 0.3797977 after 355
    /// iterations at its default tolerance; 0.3794771 converged). Slow: run with
    /// `cargo test --release -p iterstore-algo fashion -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn fashion_mnist_reaches_the_peers_objective() {
        let dir = std::env::var("ITERSTORE_DATA").map_or_else(
            |_| {
                std::path::PathBuf::from(std::env::var("HOME").unwrap())
                    .join(".cache/iterstore-data")
            },
            std::path::PathBuf::from,
        );
        let set = iterstore_data::load_fashion_mnist(&dir.join("fashion-mnist")).unwrap();
        let shape = Shape {
            classes: set.classes,
            features: set.train.pixels_per_image(),
        };
        let mut f = |w: &[f64]| objective(shape, w, &set.train, 1e-4);
        let (w, steps) = minimize(&mut f, vec![0.0; shape.len()], 20, 400, 0.0);
        let target = 0.37979766996829617 * (1.0 + 1e-4);
        let reached = steps.iter().position(|s| s.objective <= target);
        for (i, s) in steps.iter().enumerate().filter(|(i, _)| i % 25 == 0) {
            println!(
                "iteration {i}: {:.10} ({} evaluations)",
                s.objective, s.evaluations
            );
        }
        println!(
            "reached 1e-4 of the peer at iteration {:?}; test accuracy {:.4}",
            reached.map(|i| i + 1),
            accuracy(shape, &w, &set.test)
        );
        assert!(reached.is_some_and(|i| i < 355));
    }

    /// `n` random images of 5 × 4 pixels (many of them 0) in 3 classes.
    fn images(n: usize, seed: u64) -> Images {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        Images {
            rows: 5,
            cols: 4,
            pixels: (0..n * 20)
                .map(|_| if rng.gen_bool(0.4) { 0 } else { rng.gen() })
                .collect(),
            labels: (0..n).map(|_| rng.gen_range(0..3)).collect(),
        }
    }

    /// The same samples, not dense: `loss_grad` takes its per-sample path.
    struct Sparse<'a>(&'a Images);

    impl Samples for Sparse<'_> {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn features(&self) -> usize {
            self.0.features()
        }
        fn label(&self, i: usize) -> usize {
            self.0.label(i)
        }
        fn for_each(&self, i: usize, f: &mut dyn FnMut(usize, f64)) {
            self.0.for_each(i, f)
        }
    }

    #[test]
    fn dense_samples_give_the_per_sample_loss_and_gradient() {
        let d = images(150, 4);
        let shape = Shape {
            classes: 3,
            features: 20,
        };
        let w: Vec<f64> = (0..shape.len()).map(|i| (i as f64 * 0.7).cos()).collect();
        // A range across blocks of 64, starting inside one.
        let (mut a, mut b) = (vec![0.5; shape.len()], vec![0.5; shape.len()]);
        let la = loss_grad(shape, &w, &d, 7..150, &mut a);
        let lb = loss_grad(shape, &w, &Sparse(&d), 7..150, &mut b);
        assert!((la - lb).abs() < 1e-10 * lb.abs(), "{la} vs {lb}");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!((x - y).abs() < 1e-10 * y.abs().max(1.0), "{i}: {x} vs {y}");
        }
        let mut rows = vec![0.0; 3 * 20];
        Sparse(&d).dense_rows(3..6, &mut rows);
        let mut direct = vec![0.0; 3 * 20];
        d.dense_rows(3..6, &mut direct);
        assert_eq!(rows, direct);
    }

    #[test]
    fn a_range_split_in_two_sums_to_the_whole() {
        let d = data(30, 3);
        let shape = Shape {
            classes: 3,
            features: 4,
        };
        let w: Vec<f64> = (0..shape.len()).map(|i| i as f64 * 0.01).collect();
        let mut whole = vec![0.0; shape.len()];
        let lw = loss_grad(shape, &w, &d, 0..30, &mut whole);
        let (mut a, mut b) = (vec![0.0; shape.len()], vec![0.0; shape.len()]);
        let la = loss_grad(shape, &w, &d, 0..13, &mut a);
        let lb = loss_grad(shape, &w, &d, 13..30, &mut b);
        assert!((la + lb - lw).abs() < 1e-12);
        for ((x, y), z) in a.iter().zip(&b).zip(&whole) {
            assert!((x + y - z).abs() < 1e-12);
        }
    }
}
