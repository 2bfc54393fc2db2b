//! The SSP consistency rules as a pure state machine: no IO, no threads, no time.
//!
//! Vocabulary:
//! - a worker's **clock** `c` is the number of `CLOCK` calls it has completed; updates it
//!   makes before its `(c+1)`-th `CLOCK` belong to clock `c`;
//! - a value's **data clock** `d` promises that it includes every update made during clocks
//!   `0..d` by every worker (it may include more);
//! - a worker at clock `c` with staleness `s` may use a value only if `d >= c - s`, i.e. it
//!   sees every update from clocks `<= c - s - 1` ([`Staleness::required_data_clock`]).
//!
//! The server side keeps each worker's clock in a [`ClockTable`]; its minimum is the data
//! clock of everything the server holds. Reads that need a newer data clock wait in
//! [`DeferredReads`] until the minimum catches up. A worker that has finished its work is
//! not waited for: it has flushed everything and will add nothing more.
//!
//! `net`, `client` and `server` drive these types; nothing here knows about them.

use crate::ids::Clock;
use std::collections::BTreeMap;

/// How stale a read may be: Stale Synchronous Parallel with bound `s`.
///
/// A worker that has completed `c` clocks reads values that include every update made
/// during clocks `0..=c-s-1` by every worker, plus all of its own updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staleness {
    /// SSP with this bound; `Bounded(0)` is Bulk Synchronous Parallel.
    Bounded(u32),
    /// No bound within a run (fully asynchronous): a read needs only the values every
    /// worker had when the run began (each run starts from every update of the runs
    /// before it), and a worker never waits for a slower one. The store still refreshes
    /// its cache as it goes — a specialized worker's per-clock refresh, a generic miss —
    /// so reads are usually much fresher than that, and a run fetches about as many rows
    /// as under BSP: what asynchrony saves is the waiting, not the fetching.
    Unbounded,
}

impl std::str::FromStr for Staleness {
    type Err = String;

    /// Parses `"0"`, `"3"`, … or `"async"` / `"unbounded"`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "async" | "unbounded" | "inf" => Ok(Staleness::Unbounded),
            _ => s.parse::<u32>().map(Staleness::Bounded).map_err(|_| {
                format!("staleness '{s}' is neither a non-negative integer nor 'async'")
            }),
        }
    }
}

impl Staleness {
    /// Bulk Synchronous Parallel (`s = 0`).
    pub const BSP: Staleness = Staleness::Bounded(0);

    /// The smallest data clock a worker at `worker_clock` may read.
    #[inline]
    pub(crate) fn required_data_clock(self, worker_clock: Clock) -> Clock {
        match self {
            Staleness::Bounded(s) => worker_clock.saturating_sub(u64::from(s)),
            Staleness::Unbounded => 0,
        }
    }

    /// [`required_data_clock`](Self::required_data_clock) for a worker in a run that
    /// started at clock `run_start`: also every clock before the run. A run starts after
    /// every worker finished all earlier clocks, so this waits for no other worker, only
    /// for the servers to apply what was already sent; and since a worker does not carry
    /// its sent updates from one run to the next, it is what keeps read-my-writes across
    /// runs.
    #[inline]
    pub(crate) fn required_in_run(self, worker_clock: Clock, run_start: Clock) -> Clock {
        self.required_data_clock(worker_clock).max(run_start)
    }

    /// Whether a value with `data_clock` is fresh enough for a worker at `worker_clock`
    /// (the rule the tests state; the store compares with `required_data_clock`).
    #[cfg(test)]
    fn is_fresh(self, data_clock: Clock, worker_clock: Clock) -> bool {
        data_clock >= self.required_data_clock(worker_clock)
    }
}

/// Per-worker clocks as a server sees them, and their minimum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockTable {
    clocks: Vec<Clock>,
    finished: Vec<bool>,
    min: Clock,
}

impl ClockTable {
    /// `workers` workers, all at clock 0 and active.
    pub fn new(workers: usize) -> Self {
        ClockTable {
            clocks: vec![0; workers],
            finished: vec![false; workers],
            min: 0,
        }
    }

    /// The data clock of the server's state: the minimum clock over active workers, or
    /// the maximum over all workers when none is active. Never decreases, but by
    /// [`roll_back`](Self::roll_back).
    pub fn min_clock(&self) -> Clock {
        self.min
    }

    /// Records that `worker` completed clock `clock`, which must be exactly one more
    /// than its last: a clock that goes backwards, repeats or skips is a protocol error
    /// naming the worker, never clamped. Returns the new minimum if it advanced.
    pub fn tick(&mut self, worker: usize, clock: Clock) -> Result<Option<Clock>, ClockError> {
        let c = self
            .clocks
            .get_mut(worker)
            .ok_or(ClockError::UnknownWorker { worker })?;
        if clock != *c + 1 {
            return Err(ClockError::OutOfOrder {
                worker,
                last: *c,
                clock,
            });
        }
        *c = clock;
        Ok(self.recompute())
    }

    /// Records that `worker` has finished: it is no longer waited for.
    pub fn finish(&mut self, worker: usize) -> Result<Option<Clock>, ClockError> {
        *self
            .finished
            .get_mut(worker)
            .ok_or(ClockError::UnknownWorker { worker })? = true;
        Ok(self.recompute())
    }

    /// The largest clock any worker reached.
    pub fn max_clock(&self) -> Clock {
        self.clocks.iter().copied().max().unwrap_or(0)
    }

    /// Starts a new run: every worker active again at `start`, which must be at least
    /// every worker's clock (the cluster starts a run at the largest clock reached).
    pub fn resume_all(&mut self, start: Clock) -> Result<(), ClockError> {
        if let Some(worker) = self.clocks.iter().position(|&c| c > start) {
            return Err(ClockError::OutOfOrder {
                worker,
                last: self.clocks[worker],
                clock: start,
            });
        }
        self.clocks.fill(start);
        self.finished.fill(false);
        self.min = self.min.max(start);
        Ok(())
    }

    /// After a loss: every worker active again at `to`, the minimum too, even where they
    /// (and it) were further (their updates past `to` are discarded and sent again).
    pub(crate) fn roll_back(&mut self, to: Clock) {
        self.clocks.fill(to);
        self.finished.fill(false);
        self.min = to;
    }

    fn recompute(&mut self) -> Option<Clock> {
        let active = self
            .clocks
            .iter()
            .zip(&self.finished)
            .filter(|(_, f)| !**f)
            .map(|(c, _)| *c)
            .min();
        let new = active.unwrap_or_else(|| self.clocks.iter().copied().max().unwrap_or(0));
        if new > self.min {
            self.min = new;
            Some(new)
        } else {
            None
        }
    }
}

/// A clock message the [`ClockTable`] refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    /// The worker id is outside the cluster.
    #[error("clock from unknown worker {worker}")]
    UnknownWorker {
        /// The worker.
        worker: usize,
    },
    /// The clock is not the one after the worker's last.
    #[error(
        "worker {worker} sent clock {clock} after clock {last}: clocks must advance one by one"
    )]
    OutOfOrder {
        /// The worker.
        worker: usize,
        /// Its last clock.
        last: Clock,
        /// The clock it sent.
        clock: Clock,
    },
}

/// Reads waiting for the server's data clock to reach what they require.
#[derive(Debug)]
pub struct DeferredReads<R> {
    waiting: BTreeMap<Clock, Vec<R>>,
}

impl<R> Default for DeferredReads<R> {
    fn default() -> Self {
        DeferredReads {
            waiting: BTreeMap::new(),
        }
    }
}

impl<R> DeferredReads<R> {
    /// Parks `read` until the data clock reaches `required`.
    pub fn defer(&mut self, required: Clock, read: R) {
        self.waiting.entry(required).or_default().push(read);
    }

    /// Removes and returns every read whose requirement `min_clock` satisfies, in
    /// order of requirement.
    pub fn release(&mut self, min_clock: Clock) -> Vec<R> {
        let ready = match min_clock.checked_add(1) {
            Some(bound) => {
                let later = self.waiting.split_off(&bound);
                std::mem::replace(&mut self.waiting, later)
            }
            None => std::mem::take(&mut self.waiting),
        };
        ready.into_values().flatten().collect()
    }

    /// Number of parked reads.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting.values().map(Vec::len).sum()
    }

    /// Whether no read is parked.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_requires_every_clock_before_it() {
        let s = Staleness::Bounded(2);
        assert_eq!(s.required_in_run(5, 4), 4);
        assert_eq!(s.required_in_run(9, 4), 7);
        assert_eq!(Staleness::Unbounded.required_in_run(9, 4), 4);
    }

    #[test]
    fn freshness_rule_matches_ssp_definition() {
        // A worker at clock 5 with s = 2 must see clocks 0..=2, i.e. data clock >= 3.
        let s = Staleness::Bounded(2);
        assert_eq!(s.required_data_clock(5), 3);
        assert!(s.is_fresh(3, 5));
        assert!(!s.is_fresh(2, 5));
        assert!(s.is_fresh(0, 1));
        // BSP: at clock c every clock < c must be in.
        assert!(Staleness::BSP.is_fresh(4, 4));
        assert!(!Staleness::BSP.is_fresh(3, 4));
        assert!(Staleness::Unbounded.is_fresh(0, 1_000));
    }

    #[test]
    fn min_clock_tracks_slowest_active_worker() {
        let mut t = ClockTable::new(3);
        assert_eq!(t.tick(0, 1), Ok(None));
        assert_eq!(t.tick(1, 1), Ok(None));
        assert_eq!(t.tick(1, 2), Ok(None));
        assert_eq!(t.tick(2, 1), Ok(Some(1)));
        assert_eq!(t.tick(0, 2), Ok(None));
        assert_eq!(t.tick(0, 3), Ok(None));
        // Worker 2 finishes at clock 1: the minimum jumps to the slowest active one.
        assert_eq!(t.finish(2), Ok(Some(2)));
        assert_eq!(t.finish(1), Ok(Some(3)));
        // Everyone finished: the maximum clock.
        assert_eq!(t.finish(0), Ok(None));
        assert_eq!(t.min_clock(), 3);
        // Resumed at the common clock; the minimum never goes back.
        t.resume_all(t.max_clock()).unwrap();
        assert_eq!(t.min_clock(), 3);
        assert_eq!(t.tick(0, 4), Ok(None));
        assert_eq!(
            t.tick(7, 9),
            Err(ClockError::UnknownWorker { worker: 7 }),
            "unknown workers are refused"
        );
    }

    #[test]
    fn clock_regressions_are_errors_naming_the_worker() {
        let mut t = ClockTable::new(2);
        t.tick(1, 1).unwrap();
        let back = t.tick(1, 1).unwrap_err();
        assert_eq!(
            back,
            ClockError::OutOfOrder {
                worker: 1,
                last: 1,
                clock: 1
            }
        );
        assert!(back.to_string().contains("worker 1"), "{back}");
        assert!(t.tick(0, 3).is_err(), "a skipped clock");
        assert!(
            t.resume_all(0).is_err(),
            "a run cannot start before a worker's clock"
        );
        assert_eq!(t.min_clock(), 0);
    }

    #[test]
    fn deferred_reads_release_in_requirement_order() {
        let mut d = DeferredReads::default();
        d.defer(3, "c");
        d.defer(1, "a");
        d.defer(2, "b");
        d.defer(5, "e");
        assert_eq!(d.len(), 4);
        assert_eq!(d.release(2), vec!["a", "b"]);
        assert!(d.release(2).is_empty());
        assert_eq!(d.release(4), vec!["c"]);
        assert_eq!(d.release(u64::MAX - 1), vec!["e"]);
        assert!(d.is_empty());
    }
}
