//! [`LiveWorkers`]: what a process's workers publish while they run, for observers on
//! other threads (the metrics endpoint): each local worker's clock and the time its reads
//! spent waiting for a row fresh enough for the staleness bound.
//!
//! Relaxed atomics, one word per worker and value, written by the worker that owns them:
//! a store per CLOCK, and two reads of the clock per read that had to wait (none on a
//! read served at once). It knows nothing of who reads them.

use crate::ids::{Clock, WorkerId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Per local worker: its clock and its reads' waiting time (see the module docs).
#[derive(Debug)]
pub(crate) struct LiveWorkers {
    /// The global id of this process's first worker.
    first: WorkerId,
    /// Per local worker: the clock it is in (set when a run starts and at each CLOCK).
    clocks: Vec<AtomicU64>,
    /// Per local worker: nanoseconds its reads waited for a fresh enough row.
    read_wait_ns: Vec<AtomicU64>,
}

/// One local worker's published values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LiveWorker {
    /// Its global id.
    pub(crate) id: WorkerId,
    /// The clock it is in.
    pub(crate) clock: Clock,
    /// Time its reads waited for a fresh enough row, in total.
    pub(crate) read_wait: Duration,
}

impl LiveWorkers {
    /// Slots for `workers` local workers, the first of which has global id `first`.
    pub(crate) fn new(first: WorkerId, workers: usize) -> LiveWorkers {
        let zeros = || (0..workers).map(|_| AtomicU64::new(0)).collect();
        LiveWorkers {
            first,
            clocks: zeros(),
            read_wait_ns: zeros(),
        }
    }

    /// Local worker `w` is now in clock `clock`.
    #[inline]
    pub(crate) fn set_clock(&self, w: usize, clock: Clock) {
        self.clocks[w].store(clock, Ordering::Relaxed);
    }

    /// Local worker `w`'s read waited since `since` (when it first found its row not
    /// fresh enough).
    pub(crate) fn waited(&self, w: usize, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.read_wait_ns[w].fetch_add(ns, Ordering::Relaxed);
    }

    /// Every local worker's values now, in worker order.
    pub(crate) fn snapshot(&self) -> Vec<LiveWorker> {
        (self.clocks.iter().zip(&self.read_wait_ns).enumerate())
            .map(|(w, (clock, wait))| LiveWorker {
                id: self.first + w as WorkerId,
                clock: clock.load(Ordering::Relaxed),
                read_wait: Duration::from_nanos(wait.load(Ordering::Relaxed)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_workers_are_reported_by_their_global_id() {
        let live = LiveWorkers::new(4, 2);
        live.set_clock(1, 7);
        live.waited(0, Instant::now() - Duration::from_millis(3));
        let s = live.snapshot();
        assert_eq!((s[0].id, s[0].clock), (4, 0));
        assert_eq!((s[1].id, s[1].clock), (5, 7));
        assert!(s[0].read_wait >= Duration::from_millis(3));
        assert_eq!(s[1].read_wait, Duration::ZERO);
    }
}
