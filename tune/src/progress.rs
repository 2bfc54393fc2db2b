//! Progress summaries: how fast a branch's loss falls, robust to noise — MLtuner's
//! measure, which is what lets branches trained for equal time be compared.
//!
//! A trace is the branch's progress measure (a loss: lower is better) after each clock,
//! with the time it was reached. [`summarize`] averages it down to a few points
//! ([`Thresholds::samples`]: noise within a group cancels), puts the branch's starting
//! point in front, and returns the slope from start to end **with a penalty**: the
//! largest rise between consecutive points is added to the fall, so a branch that
//! wobbled upward scores worse than one that fell as far steadily. A branch whose loss
//! rose past [`Thresholds::divergence`] × its start (or became non-finite) diverged; one
//! whose largest rise exceeds [`Thresholds::go_up`] of its total fall is unstable.

use serde::{Deserialize, Serialize};

/// What a branch's trace says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Convergence {
    /// The loss falls, and rises by less than the threshold on the way.
    Converging,
    /// The loss falls overall but rose by more than the threshold on the way.
    Unstable,
    /// The loss did not fall (slope with penalty ≥ 0).
    NoProgress,
    /// The loss became non-finite or rose past the divergence factor.
    Diverged,
}

/// A trace's summary.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The verdict.
    pub state: Convergence,
    /// The slope with penalty (loss per second, negative when it falls); `None` unless
    /// the loss fell.
    pub slope: Option<f64>,
}

/// The thresholds of a summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Points a trace is averaged down to (at least 2).
    pub samples: usize,
    /// Largest rise, as a fraction of the total fall, that is still stable.
    pub go_up: f64,
    /// A loss above this many times its start has diverged.
    pub divergence: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            samples: 5,
            go_up: 0.2,
            divergence: 10.0,
        }
    }
}

/// Averages `values` in consecutive groups of `rate` (a trailing partial group kept).
fn downsample(values: &[f64], rate: usize) -> Vec<f64> {
    values
        .chunks(rate.max(1))
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect()
}

/// Summarizes a trace: `start` is the branch's `(time, loss)` when it began (its
/// parent's loss at the fork), `times`/`losses` its points since (equal lengths).
pub fn summarize(start: (f64, f64), times: &[f64], losses: &[f64], t: &Thresholds) -> Summary {
    let n = times.len().min(losses.len());
    let no = |state| Summary { state, slope: None };
    if losses[..n].iter().any(|l| !l.is_finite())
        || (start.1 > 0.0 && losses[..n].iter().any(|l| *l > start.1 * t.divergence))
    {
        return no(Convergence::Diverged);
    }
    if n == 0 {
        return no(Convergence::NoProgress);
    }
    let rate = n.div_ceil(t.samples.max(2));
    let mut xs = vec![start.0];
    xs.extend(downsample(&times[..n], rate));
    let mut ys = vec![start.1];
    ys.extend(downsample(&losses[..n], rate));
    let span = xs[xs.len() - 1] - xs[0];
    let fall = ys[ys.len() - 1] - ys[0];
    let rise = ys.windows(2).map(|w| w[1] - w[0]).fold(0.0f64, f64::max);
    if span <= 0.0 || fall + rise >= 0.0 {
        return no(Convergence::NoProgress);
    }
    let state = if rise > fall.abs() * t.go_up {
        Convergence::Unstable
    } else {
        Convergence::Converging
    };
    Summary {
        state,
        slope: Some((fall + rise) / span),
    }
}

/// Whether the best of the last `window` validation results (higher is better) is no
/// better than the best before them: progress has stalled.
pub fn plateaued(results: &[f64], window: usize) -> bool {
    if window == 0 || results.len() <= window {
        return false;
    }
    let (before, last) = results.split_at(results.len() - window);
    let best = |r: &[f64]| r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    best(last) <= best(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(n: usize) -> Vec<f64> {
        (1..=n).map(|i| i as f64).collect()
    }

    #[test]
    fn a_steady_fall_converges_and_a_faster_one_scores_better() {
        let t = Thresholds::default();
        let slow: Vec<f64> = (1..=10).map(|i| 10.0 - 0.5 * i as f64).collect();
        let fast: Vec<f64> = (1..=10).map(|i| 10.0 - 0.8 * i as f64).collect();
        let a = summarize((0.0, 10.0), &times(10), &slow, &t);
        let b = summarize((0.0, 10.0), &times(10), &fast, &t);
        assert_eq!(a.state, Convergence::Converging);
        assert!(b.slope.unwrap() < a.slope.unwrap());
    }

    #[test]
    fn a_rise_on_the_way_is_penalized_and_noise_is_averaged_away() {
        let t = Thresholds::default();
        // Falls as far as the steady one, but jumps up once in the middle.
        let mut wobbly: Vec<f64> = (1..=10).map(|i| 10.0 - 0.5 * i as f64).collect();
        wobbly[4] = 10.0;
        wobbly[5] = 10.0;
        let steady: Vec<f64> = (1..=10).map(|i| 10.0 - 0.5 * i as f64).collect();
        let w = summarize((0.0, 10.0), &times(10), &wobbly, &t);
        let s = summarize((0.0, 10.0), &times(10), &steady, &t);
        assert_eq!(w.state, Convergence::Unstable);
        assert!(w.slope.unwrap() > s.slope.unwrap());
        // Alternating noise of ±0.3 around the steady fall: averaged in pairs, stable.
        let noisy: Vec<f64> = steady
            .iter()
            .enumerate()
            .map(|(i, v)| v + if i % 2 == 0 { 0.3 } else { -0.3 })
            .collect();
        assert_eq!(
            summarize((0.0, 10.0), &times(10), &noisy, &t).state,
            Convergence::Converging
        );
    }

    #[test]
    fn rising_or_exploding_losses_are_told_apart() {
        let t = Thresholds::default();
        let flat = vec![10.0; 6];
        assert_eq!(
            summarize((0.0, 10.0), &times(6), &flat, &t).state,
            Convergence::NoProgress
        );
        let up: Vec<f64> = (1..=6).map(|i| 10.0 + i as f64).collect();
        assert_eq!(summarize((0.0, 10.0), &times(6), &up, &t).slope, None);
        let boom = vec![50.0, 200.0];
        assert_eq!(
            summarize((0.0, 10.0), &times(2), &boom, &t).state,
            Convergence::Diverged
        );
        let nan = vec![5.0, f64::NAN];
        assert_eq!(
            summarize((0.0, 10.0), &times(2), &nan, &t).state,
            Convergence::Diverged
        );
    }

    #[test]
    fn a_plateau_is_a_window_without_a_new_best() {
        assert!(!plateaued(&[0.5, 0.6, 0.7], 2));
        assert!(plateaued(&[0.5, 0.8, 0.7, 0.79], 2));
        assert!(!plateaued(&[0.5, 0.8, 0.7, 0.81], 2));
        assert!(!plateaued(&[0.8, 0.7], 2));
    }
}
