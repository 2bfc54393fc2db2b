//! The convolution kernels against a direct loop over every output and tap on random small
//! shapes (absolute tolerance 1e-4 on values of order 1), and their gradients against
//! central finite differences of a scalar loss (see [`gradients_match_finite_differences`]).

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A random geometry with at most 3 channels each way and images of up to 8 × 8.
fn geometry(rng: &mut StdRng) -> ConvGeometry {
    let kernel: usize = rng.gen_range(1..=4);
    let padding = rng.gen_range(0..=2);
    let least = kernel.saturating_sub(2 * padding).max(1);
    ConvGeometry {
        in_channels: rng.gen_range(1..=3),
        out_channels: rng.gen_range(1..=3),
        height: rng.gen_range(least..=8),
        width: rng.gen_range(least..=8),
        kernel,
        stride: rng.gen_range(1..=3),
        padding,
    }
}

fn values(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-0.5..0.5)).collect()
}

/// The index of input pixel `(c, iy, ix)`, `None` in the padding.
fn pixel(g: &ConvGeometry, c: usize, iy: isize, ix: isize) -> Option<usize> {
    let inside = (0..g.height as isize).contains(&iy) && (0..g.width as isize).contains(&ix);
    inside.then(|| (c * g.height + iy as usize) * g.width + ix as usize)
}

/// Calls `f(o, oy, ox, c, ky, kx, input index)` for every connection of one image.
fn each_connection(
    g: &ConvGeometry,
    mut f: impl FnMut(usize, usize, usize, usize, usize, usize, usize),
) {
    for o in 0..g.out_channels {
        for oy in 0..g.out_height() {
            for ox in 0..g.out_width() {
                for c in 0..g.in_channels {
                    for ky in 0..g.kernel {
                        for kx in 0..g.kernel {
                            let iy = (oy * g.stride + ky) as isize - g.padding as isize;
                            let ix = (ox * g.stride + kx) as isize - g.padding as isize;
                            if let Some(i) = pixel(g, c, iy, ix) {
                                f(o, oy, ox, c, ky, kx, i);
                            }
                        }
                    }
                }
            }
        }
    }
}

fn weight_index(g: &ConvGeometry, o: usize, c: usize, ky: usize, kx: usize) -> usize {
    ((o * g.in_channels + c) * g.kernel + ky) * g.kernel + kx
}

fn out_index(g: &ConvGeometry, o: usize, oy: usize, ox: usize) -> usize {
    (o * g.out_height() + oy) * g.out_width() + ox
}

/// The pre-activations of one image by the definition.
fn naive_forward(g: &ConvGeometry, w: &[f32], bias: &[f32], x: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0f32; g.output_len()];
    for o in 0..g.out_channels {
        y[o * g.positions()..][..g.positions()].fill(bias[o]);
    }
    each_connection(g, |o, oy, ox, c, ky, kx, i| {
        y[out_index(g, o, oy, ox)] += w[weight_index(g, o, c, ky, kx)] * x[i];
    });
    y
}

fn close(got: &[f32], want: &[f32], tolerance: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tolerance, "{what}[{i}]: {a} against {b}");
    }
}

#[test]
fn forward_backward_and_update_equal_the_direct_loops() {
    let mut rng = StdRng::seed_from_u64(13);
    let mut cols = Vec::new();
    for case in 0..40 {
        let g = geometry(&mut rng);
        let batch = rng.gen_range(1..=3);
        let (w, bias) = (
            values(&mut rng, g.weights_len()),
            values(&mut rng, g.out_channels),
        );
        let x = values(&mut rng, batch * g.input_len());
        let what = format!("case {case}: {g:?}, batch {batch}");
        for act in [Activation::Identity, Activation::Relu, Activation::Logistic] {
            let mut y = vec![f32::NAN; batch * g.output_len()];
            forward(&g, &w, Some(&bias), &x, &mut y, batch, act, &mut cols);
            let mut want: Vec<f32> = (0..batch)
                .flat_map(|b| naive_forward(&g, &w, &bias, &x[b * g.input_len()..]))
                .collect();
            act.apply(&mut want);
            close(&y, &want, 1e-4, &format!("{what}, {act:?} forward"));
        }
        let delta_out = values(&mut rng, batch * g.output_len());
        let mut delta_in = vec![f32::NAN; batch * g.input_len()];
        backward(&g, &w, &delta_out, &mut delta_in, batch, &mut cols);
        let mut want_in = vec![0.0f32; batch * g.input_len()];
        let (mut want_w, mut want_b) = (w.clone(), bias.clone());
        for b in 0..batch {
            let (xb, d) = (&x[b * g.input_len()..], &delta_out[b * g.output_len()..]);
            each_connection(&g, |o, oy, ox, c, ky, kx, i| {
                let dv = d[out_index(&g, o, oy, ox)];
                want_in[b * g.input_len() + i] += w[weight_index(&g, o, c, ky, kx)] * dv;
                want_w[weight_index(&g, o, c, ky, kx)] -= 0.5 * dv * xb[i];
            });
            for o in 0..g.out_channels {
                want_b[o] -= 0.5 * d[o * g.positions()..][..g.positions()].iter().sum::<f32>();
            }
        }
        close(&delta_in, &want_in, 1e-4, &format!("{what}, backward"));
        let (mut w2, mut b2) = (w.clone(), bias.clone());
        update(
            &g,
            &mut w2,
            Some(&mut b2),
            &delta_out,
            &x,
            0.5,
            batch,
            &mut cols,
        );
        close(&w2, &want_w, 1e-4, &format!("{what}, update"));
        close(&b2, &want_b, 1e-4, &format!("{what}, bias update"));
    }
}

/// [`update`] gives the bits of the GEMM over `im2col`'s columns read through swapped
/// strides (how it computed the step before its operands were laid out by position), on
/// the random small shapes and on the app's CNN layers (kernel 5, 16 and 32 channels).
#[test]
fn update_by_position_gives_the_bits_of_the_update_over_columns() {
    let mut rng = StdRng::seed_from_u64(29);
    let app = |in_channels, out_channels, side| ConvGeometry {
        in_channels,
        out_channels,
        height: side,
        width: side,
        kernel: 5,
        stride: 1,
        padding: 0,
    };
    let mut cases: Vec<(ConvGeometry, usize)> = (0..40)
        .map(|_| (geometry(&mut rng), rng.gen_range(1..=3)))
        .collect();
    cases.extend([(app(1, 16, 28), 32), (app(16, 32, 12), 32)]);
    let (mut cols, mut scratch_cols) = (Vec::new(), Vec::new());
    for (i, (g, batch)) in cases.into_iter().enumerate() {
        let (w, bias) = (
            values(&mut rng, g.weights_len()),
            values(&mut rng, g.out_channels),
        );
        let x = values(&mut rng, batch * g.input_len());
        // The first case's error terms are all −0.0: the bias's sums keep their sign.
        let delta_out = match i {
            0 => vec![-0.0; batch * g.output_len()],
            _ => values(&mut rng, batch * g.output_len()),
        };
        let (mut w1, mut b1) = (w.clone(), bias.clone());
        update(
            &g,
            &mut w1,
            Some(&mut b1),
            &delta_out,
            &x,
            0.5,
            batch,
            &mut cols,
        );
        let (mut w2, mut b2) = (w, bias);
        let (taps, n) = (g.taps(), batch * g.positions());
        let (c, delta) = scratch(&g, batch, &mut scratch_cols);
        unroll(&g, &x, c, batch);
        to_channels(&g, &delta_out, delta, batch);
        gemm(
            (g.out_channels, n, taps),
            -0.5,
            (delta, n, 1),
            (c, 1, n),
            1.0,
            &mut w2,
        );
        for (v, row) in b2.iter_mut().zip(delta.chunks_exact(n)) {
            *v -= 0.5 * row.iter().sum::<f32>();
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&w1), bits(&w2), "{g:?}, batch {batch}: weights");
        assert_eq!(bits(&b1), bits(&b2), "{g:?}, batch {batch}: bias");
    }
}

/// `L = Σ r ∘ σ(conv(x, w) + b)` in `f64`.
fn loss(g: &ConvGeometry, w: &[f32], bias: &[f32], x: &[f32], r: &[f32], batch: usize) -> f64 {
    let mut y = vec![0.0; batch * g.output_len()];
    forward(
        g,
        w,
        Some(bias),
        x,
        &mut y,
        batch,
        Activation::Logistic,
        &mut Vec::new(),
    );
    y.iter()
        .zip(r)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum()
}

/// The central difference of `L` in coordinate `i` of `v` (a copy of `x`, `w` or `bias`).
fn numeric(mut v: Vec<f32>, i: usize, l: impl Fn(&[f32]) -> f64) -> f64 {
    const EPS: f32 = 1e-2;
    let at = v[i];
    v[i] = at + EPS;
    let up = l(&v);
    v[i] = at - EPS;
    let down = l(&v);
    (up - down) / (2.0 * f64::from(EPS))
}

/// Analytic gradients of `L = Σ r ∘ σ(conv(x, w) + b)`: `δ_out = r ∘ σ'`, `∂L/∂x` by
/// [`backward`], `∂L/∂w` and `∂L/∂b` by [`update`] with rate −1 on zeros. Central
/// differences with step 1e-2 in `f32` agree within 2e-3 + 1 % (the `f32` rounding of
/// the loss over the step dominates the error).
#[test]
fn gradients_match_finite_differences() {
    let mut rng = StdRng::seed_from_u64(14);
    let mut cols = Vec::new();
    for case in 0..8 {
        let g = geometry(&mut rng);
        let batch = rng.gen_range(1..=2);
        let (w, bias) = (
            values(&mut rng, g.weights_len()),
            values(&mut rng, g.out_channels),
        );
        let x = values(&mut rng, batch * g.input_len());
        let r = values(&mut rng, batch * g.output_len());
        let mut y = vec![0.0; batch * g.output_len()];
        forward(
            &g,
            &w,
            Some(&bias),
            &x,
            &mut y,
            batch,
            Activation::Logistic,
            &mut cols,
        );
        let mut delta = r.clone();
        Activation::Logistic.derive(&mut delta, &y);
        let mut dx = vec![0.0; x.len()];
        backward(&g, &w, &delta, &mut dx, batch, &mut cols);
        let (mut dw, mut db) = (vec![0.0; w.len()], vec![0.0; bias.len()]);
        update(
            &g,
            &mut dw,
            Some(&mut db),
            &delta,
            &x,
            -1.0,
            batch,
            &mut cols,
        );
        let check = |analytic: &[f32], v: &[f32], l: &dyn Fn(&[f32]) -> f64, what: &str| {
            for (i, &a) in analytic.iter().enumerate() {
                let n = numeric(v.to_vec(), i, l);
                let a = f64::from(a);
                assert!(
                    (a - n).abs() <= 2e-3 + 1e-2 * n.abs(),
                    "case {case} {g:?}: d{what}[{i}] {a} against {n}"
                );
            }
        };
        check(&dx, &x, &|v| loss(&g, &w, &bias, v, &r, batch), "x");
        check(&dw, &w, &|v| loss(&g, v, &bias, &x, &r, batch), "w");
        check(&db, &bias, &|v| loss(&g, &w, v, &x, &r, batch), "b");
    }
}

#[test]
fn im2col_and_col2im_are_adjoint() {
    // <im2col(x), c> = <x, col2im(c)> for every x and c: col2im routes each column entry
    // back to exactly the pixel it was read from.
    let mut rng = StdRng::seed_from_u64(15);
    for _ in 0..20 {
        let g = geometry(&mut rng);
        let x = values(&mut rng, g.input_len());
        let c = values(&mut rng, g.taps() * g.positions());
        let mut cols = vec![0.0; c.len()];
        im2col(&g, &x, &mut cols);
        let mut back = vec![0.0; x.len()];
        col2im(&g, &c, &mut back);
        let left: f64 = cols.iter().zip(&c).map(|(a, b)| f64::from(a * b)).sum();
        let right: f64 = x.iter().zip(&back).map(|(a, b)| f64::from(a * b)).sum();
        assert!((left - right).abs() < 1e-4, "{g:?}: {left} against {right}");
    }
}

#[test]
#[should_panic(expected = "does not fit")]
fn a_kernel_larger_than_the_padded_input_is_refused() {
    let g = ConvGeometry {
        in_channels: 1,
        out_channels: 1,
        height: 2,
        width: 2,
        kernel: 5,
        stride: 1,
        padding: 1,
    };
    forward(
        &g,
        &[0.0; 25],
        None,
        &[0.0; 4],
        &mut [0.0; 1],
        1,
        Activation::Identity,
        &mut Vec::new(),
    );
}
