//! L-BFGS's search direction in the vector-free form (Chen, Wang and Zhou, NIPS 2014),
//! for Sandblaster-style training whose vectors live on the parameter servers.
//!
//! The two-loop recursion computes `d = −H·g` from the last `m` steps `sᵢ` and gradient
//! changes `yᵢ`. Every vector it forms is a linear combination of the `2m + 1` base
//! vectors `b = [s₀ … s_{m−1}, y₀ … y_{m−1}, g]`, and every scalar it needs is a dot
//! product of two of them; so given their Gram matrix `B = bᵀb` (one server-function call
//! that each shard answers for its own rows, summed), the recursion runs on `2m + 1`
//! coefficients here, and `d = Σ δⱼ bⱼ` is formed by a second call on the shards. The
//! history never crosses the network; only `(2m + 1)²` numbers do.
//!
//! This module is the arithmetic alone: no store, no I/O.

/// The coefficients `δ` of the direction `d = −H·g = Σ δⱼ bⱼ` over the base vectors
/// `b = [s₀ … s_{m−1}, y₀ … y_{m−1}, g]` (oldest step first), given their Gram matrix
/// `gram` (`(2m + 1)²` entries, row-major: `gram[i·(2m+1) + j] = bᵢ · bⱼ`) and the
/// number of steps `m`. With `m = 0` the direction is `−g`.
///
/// The initial Hessian approximation is `γ·I` with `γ = s·y / y·y` of the newest step, as
/// in Nocedal and Wright's algorithm 7.4. A step with `sᵢ · yᵢ ≤ 0` (which the line search
/// should have prevented) is skipped rather than divided by.
pub fn direction(gram: &[f64], m: usize) -> Vec<f64> {
    let n = 2 * m + 1;
    assert_eq!(gram.len(), n * n, "a Gram matrix of {n} base vectors");
    let b = |i: usize, j: usize| gram[i * n + j];
    let (s, y, g) = (|i: usize| i, |i: usize| m + i, 2 * m);
    let mut delta = vec![0.0; n];
    delta[g] = -1.0;
    // q · bⱼ for the current coefficients.
    let dot = |delta: &[f64], j: usize| -> f64 { (0..n).map(|l| delta[l] * b(l, j)).sum() };
    let mut alpha = vec![0.0; m];
    let curved = |i: usize| b(s(i), y(i)) > 0.0;
    for i in (0..m).rev() {
        if !curved(i) {
            continue;
        }
        alpha[i] = dot(&delta, s(i)) / b(s(i), y(i));
        delta[y(i)] -= alpha[i];
    }
    if let Some(newest) = (0..m).rev().find(|&i| curved(i) && b(y(i), y(i)) > 0.0) {
        let gamma = b(s(newest), y(newest)) / b(y(newest), y(newest));
        for d in &mut delta {
            *d *= gamma;
        }
    }
    for i in 0..m {
        if !curved(i) {
            continue;
        }
        let beta = dot(&delta, y(i)) / b(s(i), y(i));
        delta[s(i)] += alpha[i] - beta;
    }
    delta
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The two-loop recursion on explicit vectors (Nocedal and Wright, algorithm 7.4).
    fn two_loop(s: &[Vec<f64>], y: &[Vec<f64>], g: &[f64]) -> Vec<f64> {
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
        let m = s.len();
        let mut q = g.to_vec();
        let mut alpha = vec![0.0; m];
        for i in (0..m).rev() {
            alpha[i] = dot(&s[i], &q) / dot(&s[i], &y[i]);
            for (qk, yk) in q.iter_mut().zip(&y[i]) {
                *qk -= alpha[i] * yk;
            }
        }
        let gamma = m
            .checked_sub(1)
            .map_or(1.0, |k| dot(&s[k], &y[k]) / dot(&y[k], &y[k]));
        let mut r: Vec<f64> = q.iter().map(|v| gamma * v).collect();
        for i in 0..m {
            let beta = dot(&y[i], &r) / dot(&s[i], &y[i]);
            for (rk, sk) in r.iter_mut().zip(&s[i]) {
                *rk += (alpha[i] - beta) * sk;
            }
        }
        r.iter().map(|v| -v).collect()
    }

    #[test]
    fn the_coefficients_give_the_two_loop_direction() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let n = 30;
        // y = A·s for a symmetric positive definite A, so every sᵢ·yᵢ > 0.
        let root: Vec<Vec<f64>> = (0..n)
            .map(|_| (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect())
            .collect();
        let a = |v: &[f64]| -> Vec<f64> {
            let rv: Vec<f64> = root
                .iter()
                .map(|r| r.iter().zip(v).map(|(p, q)| p * q).sum())
                .collect();
            (0..n)
                .map(|j| (0..n).map(|i| root[i][j] * rv[i]).sum::<f64>() + 0.1 * v[j])
                .collect()
        };
        for m in 0..6 {
            let s: Vec<Vec<f64>> = (0..m)
                .map(|_| (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect())
                .collect();
            let y: Vec<Vec<f64>> = s.iter().map(|v| a(v)).collect();
            let g: Vec<f64> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let base: Vec<&Vec<f64>> = s.iter().chain(&y).chain(std::iter::once(&g)).collect();
            let gram: Vec<f64> = base
                .iter()
                .flat_map(|p| {
                    base.iter()
                        .map(move |q| p.iter().zip(q.iter()).map(|(x, z)| x * z).sum())
                })
                .collect();
            let delta = direction(&gram, m);
            let d: Vec<f64> = (0..n)
                .map(|k| base.iter().zip(&delta).map(|(v, c)| c * v[k]).sum())
                .collect();
            let want = two_loop(&s, &y, &g);
            for (got, want) in d.iter().zip(&want) {
                assert!(
                    (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                    "m = {m}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn no_history_is_steepest_descent_and_a_flat_step_is_skipped() {
        // m = 0: B = [g·g].
        assert_eq!(direction(&[4.0], 0), vec![-1.0]);
        // m = 1 with s·y = 0: the step is skipped, d = −g.
        let gram = [1.0, 0.0, 0.5, 0.0, 1.0, 0.2, 0.5, 0.2, 2.0];
        assert_eq!(direction(&gram, 1), vec![0.0, 0.0, -1.0]);
    }
}
