//! How long each worker takes for a work unit, learnt across batches, and which running
//! unit a backup should take: the one expected to end last, and only if the backup is
//! expected to end first (the "longest approximate time to end" rule of Zaharia et al.'s
//! LATE scheduler for MapReduce's speculative tasks).
//!
//! Without estimates (a first batch) every unit still running elsewhere is worth a
//! backup, the oldest first, as in MapReduce; estimates only make backups better aimed
//! and spare the copies that could not win. They never change a batch's result (the first
//! result for a unit wins and units are summed in unit order), only who computes what.

use std::sync::{Mutex, PoisonError};

/// A unit overdue by more than this fraction of its holder's expected time is assumed
/// halfway done (its holder has slowed down): worth a backup by a worker as fast.
const OVERDUE: f64 = 1.25;

/// A worker whose units take this many times the median is slow enough to pass over for
/// fresh units (see [`Speeds::pass_over`]).
const SLOW: f64 = 2.0;

/// What the estimate of a worker passed over in a batch is multiplied by, so that it is
/// tried again after a few batches (its machine may have recovered).
const DECAY: f64 = 0.93;

/// Per worker, the expected seconds of one unit, kept between batches (in
/// `ClientShared::unit_times`, on the process whose worker 0 coordinates).
pub(super) type UnitTimes = Mutex<Vec<Option<f64>>>;

impl Speeds {
    /// The estimates kept in `times` for `workers` workers (unknown ones `None`).
    pub(super) fn load(times: &UnitTimes, workers: usize) -> Speeds {
        let mut est = times.lock().unwrap_or_else(PoisonError::into_inner).clone();
        est.resize(workers, None);
        Speeds { est }
    }

    /// Keeps these estimates in `times` for the next batch.
    pub(super) fn store(self, times: &UnitTimes) {
        *times.lock().unwrap_or_else(PoisonError::into_inner) = self.est;
    }
}

/// Per worker, the expected seconds of one unit (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Speeds {
    est: Vec<Option<f64>>,
}

impl Speeds {
    /// Worker `k` completed a unit in `secs` (its result used or not).
    pub(super) fn completed(&mut self, k: usize, secs: f64) {
        self.est[k] = Some(match self.est[k] {
            Some(e) => 0.5 * e + 0.5 * secs,
            None => secs,
        });
    }

    /// Worker `k` was stopped after `secs` without completing its unit (another ended it
    /// first): it is taken to have been halfway, as an overdue unit is
    /// ([`Speeds::remaining`]), so its units take at least twice that.
    pub(super) fn stopped(&mut self, k: usize, secs: f64) {
        let bound = 2.0 * secs;
        self.est[k] = Some(self.est[k].map_or(bound, |e| e.max(bound)));
    }

    /// Worker `k`'s expected seconds per unit: its own estimate, else the median of the
    /// known ones, else unknown.
    pub(super) fn typical(&self, k: usize) -> Option<f64> {
        self.est[k].or_else(|| self.median())
    }

    /// The expected seconds left of a unit worker `holder` has run for `elapsed`: infinite
    /// when nothing is known; once overdue (see [`OVERDUE`]), as long again as it ran.
    pub(super) fn remaining(&self, holder: usize, elapsed: f64) -> f64 {
        match self.typical(holder) {
            None => f64::INFINITY,
            Some(t) if elapsed > OVERDUE * t => elapsed,
            Some(t) => (t - elapsed).max(0.0),
        }
    }

    /// Whether worker `k`, whose own units take more than [`SLOW`] times the median, would
    /// end a fresh unit only after the workers `others` (at their expected rates) have
    /// ended all `fresh` units left: then it is better idle (a slow machine's cores also
    /// serve its shards and messages) and the others take them.
    pub(super) fn pass_over(
        &self,
        k: usize,
        fresh: usize,
        others: impl Iterator<Item = usize>,
    ) -> bool {
        let (Some(own), Some(median)) = (self.est[k], self.median()) else {
            return false;
        };
        if own <= SLOW * median {
            return false;
        }
        let rate: f64 = others
            .filter(|&j| j != k)
            .filter_map(|j| self.typical(j))
            .filter(|&t| t > 0.0)
            .map(|t| 1.0 / t)
            .sum();
        rate > 0.0 && own > fresh as f64 / rate
    }

    /// Worker `k` got no fresh unit in a batch: its estimate decays by [`DECAY`].
    pub(super) fn passed_over(&mut self, k: usize) {
        if let Some(e) = &mut self.est[k] {
            *e *= DECAY;
        }
    }

    /// The median of the known estimates.
    fn median(&self) -> Option<f64> {
        let mut known: Vec<f64> = self.est.iter().flatten().copied().collect();
        known.sort_by(f64::total_cmp);
        known.get(known.len() / 2).copied()
    }

    /// Whether a backup by worker `asker` is expected to end before a holder expected to
    /// need `remaining` more seconds (always, when `asker`'s time is unknown).
    pub(super) fn backup_wins(&self, asker: usize, remaining: f64) -> bool {
        remaining > self.typical(asker).unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speeds(est: &[Option<f64>]) -> Speeds {
        Speeds { est: est.to_vec() }
    }

    #[test]
    fn estimates_average_completions_and_take_stops_as_lower_bounds() {
        let mut s = speeds(&[None, None, None]);
        s.completed(1, 2.0);
        s.completed(1, 4.0);
        assert_eq!(s.typical(1), Some(3.0));
        // Unknown workers are taken as the median of the known ones.
        assert_eq!(s.typical(2), Some(3.0));
        s.stopped(2, 4.5);
        s.stopped(2, 2.5);
        assert_eq!(s.typical(2), Some(9.0), "stopped halfway at the latest");
        s.stopped(1, 1.0);
        assert_eq!(
            s.typical(1),
            Some(3.0),
            "a stop short of the estimate says nothing"
        );
    }

    #[test]
    fn a_backup_goes_where_it_can_win_and_nowhere_when_it_cannot() {
        // Worker 1 takes 1 s a unit, worker 2 takes 4 s.
        let s = speeds(&[None, Some(1.0), Some(4.0), None]);
        // At 1 s, worker 2's unit has 3 s left: a backup by worker 1 wins.
        let slow = s.remaining(2, 1.0);
        assert_eq!(slow, 3.0);
        assert!(s.backup_wins(1, slow));
        // Worker 1's unit, 0.9 s in, is nearly done: a backup by worker 2 cannot win, nor
        // by a worker as fast as worker 1.
        let fast = s.remaining(1, 0.9);
        assert!(!s.backup_wins(2, fast));
        assert!(!s.backup_wins(1, fast));
        // Overdue by more than a quarter, a unit is assumed halfway.
        assert_eq!(s.remaining(1, 1.2), 0.0);
        assert_eq!(s.remaining(1, 1.5), 1.5);
        assert!(s.backup_wins(1, s.remaining(1, 1.5)));
        // Nothing known: every running unit is worth a backup, as without estimates.
        let none = speeds(&[None, None]);
        assert_eq!(none.remaining(1, 0.0), f64::INFINITY);
        assert!(none.backup_wins(1, none.remaining(1, 0.0)));
    }

    #[test]
    fn only_a_much_slower_worker_is_passed_over_and_only_while_the_others_suffice() {
        // Workers 1-3 take 1 s a unit, worker 4 takes 4 s.
        let mut s = speeds(&[None, Some(1.0), Some(1.0), Some(1.0), Some(4.0)]);
        // The others end 6 units in 2 s: worker 4 would end its first after that.
        assert!(s.pass_over(4, 6, 1..5));
        // 12 units take the others 4 s: one more worker helps.
        assert!(!s.pass_over(4, 13, 1..5));
        // Twice the median is not slow enough; unknown is never passed over.
        let even = speeds(&[None, Some(1.0), Some(1.0), Some(2.0), None]);
        assert!(!even.pass_over(3, 1, 1..5));
        assert!(!even.pass_over(4, 1, 1..5));
        // Passed over, the estimate decays until the worker is tried again.
        let mut batches = 0;
        while s.pass_over(4, 6, 1..5) {
            s.passed_over(4);
            batches += 1;
        }
        // 4 × 0.93^10 ≤ 2: tried again after 10 batches.
        assert_eq!(batches, 10, "{:?}", s.typical(4));
    }

    #[test]
    fn estimates_are_kept_between_batches() {
        let times = UnitTimes::default();
        let mut s = Speeds::load(&times, 3);
        assert_eq!(s.typical(0), None);
        s.completed(2, 0.5);
        s.store(&times);
        let s = Speeds::load(&times, 4);
        assert_eq!((s.typical(2), s.typical(3)), (Some(0.5), Some(0.5)));
    }
}
