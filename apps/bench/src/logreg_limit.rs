//! Logistic regression's limit: [`iterstore_algo::logreg::minimize`] (sequential L-BFGS,
//! the app's reference) with the app's history, its objective and gradient computed on
//! plain arrays by `threads` threads over the app's work units and summed in unit order.
//! What the store adds to the same optimizer — the vectors on the shards, the server
//! functions, the units handed out over messages — is what the benchmark compares.
//!
//! [`minimize`] times nothing itself, so each evaluation of the objective is stamped as it
//! returns: an iteration ends with its line search's last evaluation (the last iteration
//! when `minimize` returns), as the app's iteration ends with its last trial's gradient
//! run and the call that accepts the step.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use iterstore_algo::limit::IterStats;
use iterstore_algo::logreg::{accuracy, finish, loss_grad, minimize, Samples, Shape};
use iterstore_apps::logreg::{LogRegData, LogRegParams};
use iterstore_apps::AppError;

/// Samples a unit's loop takes between two looks at whether it should stop, in the app;
/// the limit sums its losses in the same pieces.
const POLL: usize = 64;

/// A unit's loss and gradient, once computed.
type UnitResult = Mutex<Option<(f64, Vec<f64>)>>;

/// A limit run: per iteration its time and objective, and the final model's test accuracy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LimitRun {
    /// One record per iteration run (fewer than asked when no descent direction is left).
    pub(crate) stats: Vec<IterStats>,
    /// The test accuracy of the final model, when the data has test samples.
    pub(crate) test_accuracy: Option<f64>,
}

/// Runs L-BFGS with `params`' history and units for `iterations` iterations (stopping
/// early only where the app does: no descent direction left) on `threads` threads.
pub(crate) fn run(
    data: &LogRegData,
    params: &LogRegParams,
    threads: usize,
    iterations: usize,
) -> Result<LimitRun, AppError> {
    params.validate()?;
    if threads == 0 {
        return Err(AppError::Invalid(
            "limit: threads must be at least 1".into(),
        ));
    }
    let (shape, train) = (data.shape(), data.train());
    if train.is_empty() || shape.classes < 2 {
        return Err(AppError::Invalid(format!(
            "logreg needs samples of at least 2 classes (the input has {} samples of {})",
            train.len(),
            shape.classes
        )));
    }
    let mut stamps = Vec::with_capacity(iterations + 1);
    let (w, steps) = {
        let mut f = |w: &[f64]| {
            let (loss, grad) = gradient(shape, w, train, params.unit, threads);
            let out = finish(shape, w, train.len(), params.lambda, loss, grad);
            stamps.push(Instant::now());
            out
        };
        // No tolerance: the app runs its iterations unless no descent direction is left.
        let x0 = vec![0.0; shape.len()];
        minimize(&mut f, x0, params.history, iterations, f64::NEG_INFINITY)
    };
    let end = Instant::now();
    // stamps[0] is the initial evaluation (the app's init); step k's last evaluation is
    // stamps[1 + Σ_{j≤k} evaluations_j − 1].
    let mut done = 0;
    let mut since = stamps[0];
    let stats = (steps.iter().enumerate())
        .map(|(iter, step)| {
            done += step.evaluations;
            let until = if iter + 1 == steps.len() {
                end
            } else {
                stamps[done]
            };
            let seconds = until.duration_since(since).as_secs_f64();
            since = until;
            IterStats {
                iter,
                seconds,
                objective: step.objective,
                held_out: None,
            }
        })
        .collect();
    Ok(LimitRun {
        stats,
        test_accuracy: data.test().map(|t| accuracy(shape, &w, t)),
    })
}

/// The summed loss and gradient of `data` at `w`: units of `unit` samples computed by
/// `threads` threads (each takes the next unit not taken), added in unit order.
fn gradient(
    shape: Shape,
    w: &[f64],
    data: &dyn Samples,
    unit: usize,
    threads: usize,
) -> (f64, Vec<f64>) {
    let n = data.len();
    let units = n.div_ceil(unit);
    let results: Vec<UnitResult> = (0..units).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let work = || loop {
        let u = next.fetch_add(1, Ordering::Relaxed);
        if u >= units {
            break;
        }
        let result = unit_loss_grad(shape, w, data, u * unit..((u + 1) * unit).min(n));
        *results[u].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    let mut loss = 0.0;
    let mut grad = vec![0.0; shape.len()];
    for r in results {
        let (l, g) = r
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .expect("every unit is computed");
        loss += l;
        for (a, b) in grad.iter_mut().zip(&g) {
            *a += b;
        }
    }
    (loss, grad)
}

/// One unit's loss and gradient, its loss summed in pieces of [`POLL`] samples as the app's
/// unit sums it.
fn unit_loss_grad(
    shape: Shape,
    w: &[f64],
    data: &dyn Samples,
    range: Range<usize>,
) -> (f64, Vec<f64>) {
    let mut grad = vec![0.0; shape.len()];
    let mut loss = 0.0;
    let mut i = range.start;
    while i < range.end {
        let next = (i + POLL).min(range.end);
        loss += loss_grad(shape, w, data, i..next, &mut grad);
        i = next;
    }
    (loss, grad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterstore_algo::logreg::objective;
    use iterstore_data::ImageSpec;

    fn data() -> LogRegData {
        LogRegData::Images(
            ImageSpec {
                train: 300,
                test: 100,
                ..ImageSpec::preset("tiny").unwrap()
            }
            .generate(),
        )
    }

    #[test]
    fn the_units_sum_to_the_whole_gradient_on_any_threads() {
        let d = data();
        let (shape, train) = (d.shape(), d.train());
        let w: Vec<f64> = (0..shape.len()).map(|i| (i as f64 * 0.01).sin()).collect();
        let mut whole = vec![0.0; shape.len()];
        let loss = loss_grad(shape, &w, train, 0..train.len(), &mut whole);
        let one = gradient(shape, &w, train, 70, 1);
        assert!((one.0 - loss).abs() < 1e-9 * loss.abs());
        for (a, b) in one.1.iter().zip(&whole) {
            assert!((a - b).abs() < 1e-9 * (1.0 + b.abs()), "{a} {b}");
        }
        // Unit order, not thread timing, decides the sum: the same bits on 3 threads.
        assert_eq!(gradient(shape, &w, train, 70, 3), one);
    }

    #[test]
    fn the_limit_is_the_reference_with_a_time_per_iteration() {
        let d = data();
        let params = LogRegParams {
            unit: 50,
            history: 5,
            ..LogRegParams::default()
        };
        let run = run(&d, &params, 2, 6).unwrap();
        assert_eq!(run.stats.len(), 6);
        let (shape, train) = (d.shape(), d.train());
        let mut f = |w: &[f64]| objective(shape, w, train, params.lambda);
        let (_, steps) = minimize(&mut f, vec![0.0; shape.len()], 5, 6, f64::NEG_INFINITY);
        for (got, want) in run.stats.iter().zip(&steps) {
            let diff = (got.objective - want.objective).abs();
            assert!(diff < 1e-9 * want.objective, "{got:?} against {want:?}");
            assert!(got.seconds > 0.0, "{got:?}");
        }
        assert!(run
            .stats
            .windows(2)
            .all(|p| p[1].objective <= p[0].objective));
        let accuracy = run.test_accuracy.unwrap();
        assert!(accuracy > 0.5 && accuracy <= 1.0, "{accuracy}");
    }

    #[test]
    fn bad_settings_are_refused() {
        let d = data();
        let zero_unit = LogRegParams {
            unit: 0,
            ..LogRegParams::default()
        };
        assert!(run(&d, &zero_unit, 1, 2).is_err());
        assert!(run(&d, &LogRegParams::default(), 0, 2).is_err());
    }
}
