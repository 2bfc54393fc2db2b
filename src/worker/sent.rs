//! [`SentUpdates`]: a worker's updates of recent clocks that have been sent but that a snapshot
//! may not include yet — the one place read-my-writes finds them and the one rule that
//! forgets them.
//!
//! Under SSP `s > 0` a worker may read a snapshot older than its own sent updates; it
//! then adds, from here, every sent clock `>= data_clock` (a snapshot at data clock `d`
//! holds exactly the updates of clocks `< d`). Once every snapshot the worker may still
//! read includes a clock, that clock is forgotten. Under BSP nothing is kept: every read
//! requires every earlier clock. The generic path keeps its op logs here, the specialized
//! path its block buffers.

use crate::ids::Clock;
use std::collections::VecDeque;

/// Sent updates by clock (see the module docs), oldest first.
#[derive(Debug, Clone)]
pub(crate) struct SentUpdates<T> {
    clocks: VecDeque<(Clock, T)>,
}

impl<T> Default for SentUpdates<T> {
    fn default() -> Self {
        SentUpdates {
            clocks: VecDeque::new(),
        }
    }
}

impl<T> SentUpdates<T> {
    /// Keeps the updates of `clock`, just sent.
    pub(crate) fn push(&mut self, clock: Clock, updates: T) {
        self.clocks.push_back((clock, updates));
    }

    /// Forgets the clocks every snapshot readable from now on (data clock `>= floor`)
    /// already includes.
    pub(crate) fn prune(&mut self, floor: Clock) {
        while self.clocks.front().is_some_and(|(c, _)| *c < floor) {
            self.clocks.pop_front();
        }
    }

    /// The kept updates a snapshot at `data_clock` lacks, oldest first.
    #[inline]
    pub(crate) fn missing_from(&self, data_clock: Clock) -> impl Iterator<Item = &T> {
        self.clocks
            .iter()
            .filter(move |(c, _)| *c >= data_clock)
            .map(|(_, u)| u)
    }

    /// Every kept clock's updates.
    pub(crate) fn all(&self) -> impl Iterator<Item = &T> {
        self.clocks.iter().map(|(_, u)| u)
    }

    /// Whether nothing is kept.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.clocks.is_empty()
    }

    /// Forgets everything (a new run requires every earlier clock).
    pub(crate) fn clear(&mut self) {
        self.clocks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_get_exactly_the_clocks_they_lack() {
        let mut s = SentUpdates::default();
        for c in 3..6 {
            s.push(c, c * 10);
        }
        assert_eq!(s.missing_from(4).copied().collect::<Vec<_>>(), vec![40, 50]);
        assert_eq!(s.missing_from(9).count(), 0);
        s.prune(5);
        assert_eq!(s.all().copied().collect::<Vec<_>>(), vec![50]);
        s.clear();
        assert!(s.is_empty());
    }
}
