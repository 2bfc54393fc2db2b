//! [`Signal`]: a wake-up signal, a generation counter with a condition variable. The
//! process's (`ClientShared::signal`) is bumped by whichever thread handles the process's
//! messages (its communication thread, or in one OS process the thread that sent them)
//! whenever something a waiting thread may be waiting for arrives (rows, arena chunks, a
//! run barrier's answer, a table id, a failure); an attached shard's is bumped by a sender
//! that leaves it work (`server::ShardCell`). Waiting threads may yield for a moment (the
//! usual wait, another worker's CLOCK, ends sooner than a sleeping thread is woken), then
//! sleep on it in bounded slices and re-check their condition and the cluster's health.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long [`Signal::wait`] yields before it sleeps.
const SPIN: Duration = Duration::from_micros(200);

/// A generation counter with a condition variable (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Signal {
    /// Bumped (under `sleepers`) on every notification; read without locking.
    generation: AtomicU64,
    /// Threads asleep on `arrived`, counted under this lock: a notification with
    /// none makes no system call.
    sleepers: Mutex<usize>,
    arrived: Condvar,
    /// How long a wait yields before it sleeps ([`SPIN`], or zero).
    spin: Duration,
}

impl Signal {
    /// A signal whose waits yield for [`SPIN`] before they sleep if `yield_waits`
    /// ([`crate::Config::yield_waits`]), else sleep at once.
    pub(crate) fn new(yield_waits: bool) -> Self {
        Signal {
            spin: if yield_waits { SPIN } else { Duration::ZERO },
            ..Signal::default()
        }
    }

    /// The current generation (no lock); pass it to [`wait`](Self::wait).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Wakes every waiting thread. Only a thread asleep needs the condition variable
    /// (a system call); one yielding sees the generation change.
    pub(crate) fn notify(&self) {
        let sleepers = self.sleepers.lock().unwrap_or_else(PoisonError::into_inner);
        self.generation.fetch_add(1, Ordering::AcqRel);
        let wake = *sleepers > 0;
        drop(sleepers);
        if wake {
            self.arrived.notify_all();
        }
    }

    /// Waits until something arrived after `generation` was read, or `timeout` passed.
    /// The generation is bumped under the same lock this checks it under, so a
    /// notification between the caller's check and this wait is never missed.
    pub(crate) fn wait(&self, generation: u64, timeout: Duration) {
        // Yield for a moment before sleeping: what a worker waits for is usually another
        // worker's CLOCK, which comes sooner than a sleeping thread is woken (tens of
        // microseconds on a virtual machine), and a yielding thread gives its core to
        // any thread that has work.
        let spin_until = Instant::now() + self.spin.min(timeout);
        while !self.spin.is_zero() && Instant::now() < spin_until {
            if self.generation() != generation {
                return;
            }
            std::thread::yield_now();
        }
        // Counted as asleep under the lock the generation is bumped under: a notifier
        // either bumped it before (seen here, no sleep) or sees the count.
        let mut sleepers = self.sleepers.lock().unwrap_or_else(PoisonError::into_inner);
        if self.generation.load(Ordering::Acquire) == generation {
            *sleepers += 1;
            sleepers = match self.arrived.wait_timeout(sleepers, timeout) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
            *sleepers -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A long bound: a wake-up that was lost would show as a wait of this length.
    const LONG: Duration = Duration::from_secs(20);

    #[test]
    fn a_sleeping_waiter_is_woken_and_a_past_notification_is_not_missed() {
        for yield_waits in [false, true] {
            let signal = Arc::new(Signal::new(yield_waits));
            let seen = signal.generation();
            let waiter = {
                let signal = signal.clone();
                std::thread::spawn(move || {
                    let start = Instant::now();
                    signal.wait(seen, LONG);
                    start.elapsed()
                })
            };
            // Past the yielding phase: the waiter sleeps on the condition variable.
            std::thread::sleep(Duration::from_millis(50));
            signal.notify();
            let waited = waiter.join().unwrap();
            assert!(waited < LONG / 2, "woken after {waited:?}");
            // Notified before it waits: returns at once.
            let start = Instant::now();
            signal.wait(seen, LONG);
            assert!(start.elapsed() < LONG / 2);
            assert_eq!(*signal.sleepers.lock().unwrap(), 0);
        }
    }

    #[test]
    fn a_wait_with_nothing_arriving_ends_at_its_bound() {
        let signal = Signal::new(true);
        let start = Instant::now();
        signal.wait(signal.generation(), Duration::from_millis(30));
        assert!(start.elapsed() >= Duration::from_millis(30));
    }
}
