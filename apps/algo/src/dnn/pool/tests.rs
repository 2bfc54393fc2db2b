//! The pooling kernels against direct loops on random small shapes (exact for max
//! pooling, absolute 1e-6 for averages), and their error terms against central finite
//! differences of a scalar loss (step 1e-3, tolerance 1e-3 absolute).

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn geometry(rng: &mut StdRng) -> PoolGeometry {
    let window = rng.gen_range(1..=3);
    PoolGeometry {
        channels: rng.gen_range(1..=3),
        height: rng.gen_range(window..=7),
        width: rng.gen_range(window..=7),
        window,
        stride: rng.gen_range(1..=3),
    }
}

/// Distinct values (no ties, so the maximum is unique and differentiable), shuffled.
fn values(rng: &mut StdRng, n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..n).map(|i| i as f32 / n as f32 - 0.5).collect();
    for i in (1..n).rev() {
        v.swap(i, rng.gen_range(0..=i));
    }
    v
}

/// Every output's window by the definition: its input indices within one image.
fn windows(g: &PoolGeometry, x: &[f32]) -> Vec<Vec<usize>> {
    let mut all = Vec::new();
    for c in 0..g.channels {
        for oy in 0..g.out_height() {
            for ox in 0..g.out_width() {
                let mut w = Vec::new();
                for dy in 0..g.window {
                    for dx in 0..g.window {
                        let (iy, ix) = (oy * g.stride + dy, ox * g.stride + dx);
                        w.push((c * g.height + iy) * g.width + ix);
                    }
                }
                all.push(w);
            }
        }
    }
    assert!(all.iter().flatten().all(|&i| i < x.len()));
    all
}

#[test]
fn max_and_average_pooling_equal_the_direct_loops() {
    let mut rng = StdRng::seed_from_u64(21);
    for case in 0..40 {
        let g = geometry(&mut rng);
        let batch = rng.gen_range(1..=3);
        let (n_in, n_out) = (g.input_len(), g.output_len());
        let x = values(&mut rng, batch * n_in);
        let d = values(&mut rng, batch * n_out);
        let (mut y, mut arg) = (vec![f32::NAN; batch * n_out], vec![0; batch * n_out]);
        max_forward(&g, &x, &mut y, &mut arg, batch);
        let mut avg = vec![f32::NAN; batch * n_out];
        average_forward(&g, &x, &mut avg, batch);
        let (mut d_max, mut d_avg) = (vec![f32::NAN; batch * n_in], vec![f32::NAN; batch * n_in]);
        max_backward(&g, &d, &arg, &mut d_max, batch);
        average_backward(&g, &d, &mut d_avg, batch);
        let (mut want_max, mut want_avg) = (vec![0.0f32; batch * n_in], vec![0.0f32; batch * n_in]);
        for b in 0..batch {
            let image = &x[b * n_in..][..n_in];
            for (o, w) in windows(&g, image).iter().enumerate() {
                let at = b * n_out + o;
                let best = *w
                    .iter()
                    .max_by(|&&i, &&j| image[i].total_cmp(&image[j]))
                    .unwrap();
                assert_eq!(y[at], image[best], "case {case} {g:?}: max[{at}]");
                assert_eq!(arg[at] as usize, best, "case {case} {g:?}: argmax[{at}]");
                want_max[b * n_in + best] += d[at];
                let mean = w.iter().map(|&i| image[i]).sum::<f32>() / w.len() as f32;
                assert!(
                    (avg[at] - mean).abs() < 1e-6,
                    "case {case} {g:?}: mean[{at}]"
                );
                for &i in w {
                    want_avg[b * n_in + i] += d[at] / w.len() as f32;
                }
            }
        }
        assert_eq!(d_max, want_max, "case {case} {g:?}: max backward");
        for (i, (a, b)) in d_avg.iter().zip(&want_avg).enumerate() {
            assert!(
                (a - b).abs() < 1e-6,
                "case {case} {g:?}: average backward[{i}]"
            );
        }
    }
}

#[test]
fn error_terms_match_finite_differences() {
    // L = Σ r ∘ pool(x); ∂L/∂x is the backward pass of δ_out = r. The values are at least
    // 1/n apart, so a step of 1e-3 on an image of under 150 values moves no maximum.
    let mut rng = StdRng::seed_from_u64(22);
    for case in 0..8 {
        let g = geometry(&mut rng);
        let (n_in, n_out) = (g.input_len(), g.output_len());
        let x = values(&mut rng, n_in);
        let r = values(&mut rng, n_out);
        let loss = |x: &[f32], max: bool| -> f64 {
            let mut y = vec![0.0; n_out];
            if max {
                max_forward(&g, x, &mut y, &mut vec![0; n_out], 1);
            } else {
                average_forward(&g, x, &mut y, 1);
            }
            y.iter().zip(&r).map(|(a, b)| f64::from(a * b)).sum()
        };
        let mut arg = vec![0; n_out];
        max_forward(&g, &x, &mut vec![0.0; n_out], &mut arg, 1);
        let (mut d_max, mut d_avg) = (vec![0.0; n_in], vec![0.0; n_in]);
        max_backward(&g, &r, &arg, &mut d_max, 1);
        average_backward(&g, &r, &mut d_avg, 1);
        for (max, analytic) in [(true, &d_max), (false, &d_avg)] {
            for i in 0..n_in {
                let (mut up, mut down) = (x.clone(), x.clone());
                up[i] += 1e-3;
                down[i] -= 1e-3;
                let numeric = (loss(&up, max) - loss(&down, max)) / 2e-3;
                assert!(
                    (f64::from(analytic[i]) - numeric).abs() < 1e-3,
                    "case {case} {g:?} max {max}: d[{i}] {} against {numeric}",
                    analytic[i]
                );
            }
        }
    }
}
