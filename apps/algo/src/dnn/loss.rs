//! The output layer's loss: softmax over each sample's logits and the cross-entropy against
//! its label, with the error term `softmax − one-hot` that back-propagation starts from
//! (the gradient of the cross-entropy with respect to the logits), and the predicted class.
//!
//! Softmax is computed stably (the row's largest logit subtracted first), so large logits
//! never overflow; a NaN logit gives a NaN loss, which the app reports as divergence.

/// Turns each row of `logits` (`batch × classes`) into its softmax in place, writes the
/// error terms `softmax − one-hot(label)` into `delta` (same shape) and returns the summed
/// cross-entropy `−Σ log softmax[label]` over the batch (in `f64`).
///
/// # Panics
/// If the slices are shorter than `batch × classes` (`labels`: `batch`), or a label is not
/// below `classes`.
pub fn softmax_cross_entropy(
    logits: &mut [f32],
    labels: &[u8],
    delta: &mut [f32],
    classes: usize,
) -> f64 {
    let batch = labels.len();
    let mut loss = 0.0f64;
    for (i, &label) in labels.iter().enumerate() {
        let row = &mut logits[i * classes..(i + 1) * classes];
        let log_p = log_softmax_at(row, usize::from(label));
        loss -= f64::from(log_p);
        let d = &mut delta[i * classes..(i + 1) * classes];
        d.copy_from_slice(row);
        d[usize::from(label)] -= 1.0;
    }
    debug_assert!(delta.len() >= batch * classes);
    loss
}

/// Replaces `row` by its softmax and returns `log softmax[label]`, computed as
/// `z_label − max − ln Σ e^(z − max)` so that it never underflows to `−∞`.
fn log_softmax_at(row: &mut [f32], label: usize) -> f32 {
    // f32::max skips NaN, but a NaN logit still makes `sum` (and so the loss) NaN.
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let shifted = row[label] - max;
    let mut sum = 0.0f32;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in row.iter_mut() {
        *v /= sum;
    }
    shifted - sum.ln()
}

/// The index of the largest value of each row of `scores` (`rows × classes`); the first on
/// ties.
pub fn argmax_rows(scores: &[f32], classes: usize) -> impl Iterator<Item = usize> + '_ {
    scores.chunks_exact(classes).map(|row| {
        let mut best = 0;
        for (c, &v) in row.iter().enumerate() {
            if v > row[best] {
                best = c;
            }
        }
        best
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_loss_and_error_terms_are_the_textbook_ones() {
        let mut logits = vec![1.0f32, 2.0, 3.0, 0.0, 0.0, 0.0];
        let mut delta = vec![0.0; 6];
        let loss = softmax_cross_entropy(&mut logits, &[2, 0], &mut delta, 3);
        let e: Vec<f64> = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp()).collect();
        let sum: f64 = e.iter().sum();
        let want = -(e[2] / sum).ln() + 3f64.ln();
        assert!((loss - want).abs() < 1e-5, "{loss} vs {want}");
        for c in 0..3 {
            assert!((f64::from(logits[c]) - e[c] / sum).abs() < 1e-6);
        }
        assert!((f64::from(delta[2]) - (e[2] / sum - 1.0)).abs() < 1e-6);
        assert!((delta[3] - (1.0 / 3.0 - 1.0)).abs() < 1e-6 && (delta[4] - 1.0 / 3.0).abs() < 1e-6);
        // Each row of error terms sums to zero.
        assert!(delta.chunks(3).all(|r| r.iter().sum::<f32>().abs() < 1e-6));
    }

    #[test]
    fn the_error_terms_are_the_gradient_of_the_loss() {
        let base = [0.3f32, -1.2, 0.8, 2.0];
        let mut delta = [0.0; 4];
        softmax_cross_entropy(&mut base.clone(), &[1], &mut delta, 4);
        for c in 0..4 {
            let h = 1e-2;
            let at = |x: f32| {
                let mut z = base;
                z[c] += x;
                softmax_cross_entropy(&mut z, &[1], &mut [0.0; 4], 4)
            };
            let numeric = (at(h) - at(-h)) / (2.0 * f64::from(h));
            assert!(
                (numeric - f64::from(delta[c])).abs() < 1e-3,
                "{c}: {numeric} vs {}",
                delta[c]
            );
        }
    }

    #[test]
    fn huge_logits_stay_finite_and_nan_stays_nan() {
        let mut logits = vec![1e30f32, -1e30, 0.0];
        let mut delta = vec![0.0; 3];
        let loss = softmax_cross_entropy(&mut logits, &[1], &mut delta, 3);
        assert!(loss.is_finite() && loss > 80.0, "{loss}");
        let mut logits = vec![f32::NAN, 0.0];
        let loss = softmax_cross_entropy(&mut logits, &[1], &mut [0.0; 2], 2);
        assert!(loss.is_nan());
    }

    #[test]
    fn argmax_takes_the_first_of_ties() {
        let got: Vec<usize> = argmax_rows(&[0.1, 0.5, 0.5, 2.0, 1.0, 0.0], 3).collect();
        assert_eq!(got, vec![1, 0]);
    }
}
