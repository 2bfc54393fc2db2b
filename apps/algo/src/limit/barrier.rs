//! [`SpinBarrier`]: how the limits' worker threads meet between the phases of an
//! iteration without sleeping.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A barrier between the phases of a limit's iteration (MF's clocks, PageRank's steps): waiters spin briefly, then yield, instead of
/// sleeping on a condition variable (whose wake-up would cost more than a mini-batch's
/// merge). A worker that panics poisons it ([`SpinBarrier::guard`]), and every waiter
/// then panics too instead of waiting forever for it.
pub(crate) struct SpinBarrier {
    threads: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    poisoned: AtomicBool,
}

/// Poisons its barrier if dropped while its thread panics.
pub(crate) struct PoisonOnPanic<'a>(&'a SpinBarrier);

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.poisoned.store(true, Ordering::Release);
        }
    }
}

impl SpinBarrier {
    pub(crate) fn new(threads: usize) -> Self {
        Self {
            threads,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Held by each worker for as long as it uses the barrier.
    pub(crate) fn guard(&self) -> PoisonOnPanic<'_> {
        PoisonOnPanic(self)
    }

    /// Waits for every worker; panics if one of them panicked.
    pub(crate) fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            // Reset before releasing: the next round's arrivals see the new generation.
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if self.poisoned.load(Ordering::Acquire) {
                panic!("limit: another worker panicked during the iteration");
            }
            if spins < 1 << 10 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_worker_releases_the_others_from_the_barrier() {
        let barrier = SpinBarrier::new(3);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::thread::scope(|s| {
                for w in 0..3 {
                    let barrier = &barrier;
                    s.spawn(move || {
                        let _poison = barrier.guard();
                        barrier.wait();
                        if w == 1 {
                            panic!("worker 1 fails");
                        }
                        barrier.wait(); // would wait forever for worker 1
                    });
                }
            })
        }));
        assert!(outcome.is_err(), "the scope re-raises the panics");
        assert!(barrier.poisoned.load(Ordering::Acquire));
    }
}
