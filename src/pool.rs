//! [`WorkerPool`]: the cluster's worker threads, created once with the cluster and alive
//! across runs, so that a thread's pinning to a core and the memory it first touched
//! (its blocks, its per-thread copies) survive from one run to the next.
//!
//! A run hands worker `w` its input and runs the same closure on every thread; the call
//! returns when every thread has finished, whatever happened (a closure that panics is
//! caught and reported as that worker's result). This module knows nothing of the store:
//! no `Worker`, no messages.
//!
//! **Hand-offs.** A run is short (a PageRank iteration on a real graph takes a few hundred
//! microseconds), and waking a sleeping thread costs tens of microseconds on a virtual
//! machine, twice a run (the workers at its start, the caller at its end). So both sides
//! *yield* for a while before they sleep: a worker for [`WORKER_SPIN`] after its part of
//! a run (the next run usually starts sooner), the caller while the run is under way:
//! for [`CALLER_SPIN`], or, when the last run took longer but at most
//! [`CALLER_SPIN_MAX`], for half as long again as it ([`caller_spin`]), so that the end
//! of a run of a few milliseconds finds the caller awake (an MF iteration of 3 ms ended
//! 20 µs sooner). A yielding thread gives its core to any thread with work, so this
//! costs the workers little; past the bound both sleep on a condition variable, with the
//! generation or count they wait on changed under its lock (no wake-up is lost). With
//! [`crate::Config::yield_waits`] off both sleep at once.

use crate::error::{Error, Result};
use crate::sync::lock;
use crate::topology::{bind::bind_current_thread, bind::current_affinity};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker yields for the next run before it sleeps.
const WORKER_SPIN: Duration = Duration::from_millis(1);
/// How long the caller yields for a run to finish before it sleeps, at least.
const CALLER_SPIN: Duration = Duration::from_millis(2);
/// The longest last run the caller yields through the next one for ([`caller_spin`]):
/// past it, a wake-up is a negligible part of a run.
const CALLER_SPIN_MAX: Duration = Duration::from_millis(20);

/// How long the caller yields for a run to finish before it sleeps, the last run having
/// taken `last`: [`CALLER_SPIN`], or half as long again as `last` (and a millisecond)
/// when that is longer and `last` is at most [`CALLER_SPIN_MAX`].
fn caller_spin(last: Duration) -> Duration {
    if last > CALLER_SPIN_MAX {
        return CALLER_SPIN;
    }
    (last * 3 / 2 + Duration::from_millis(1)).max(CALLER_SPIN)
}

/// One run's work: worker `w` calls it with `w`. Borrowed from the caller of
/// [`WorkerPool::on_each`], which does not return before every worker is done with it.
type Job<'a> = dyn Fn(usize) + Sync + 'a;

/// What the caller publishes to the workers, under [`Shared::state`].
struct State {
    /// Bumped for every run (and for the stop).
    generation: u64,
    /// The run's job while it is under way (its lifetime erased: see [`WorkerPool::on_each`]).
    job: Option<&'static Job<'static>>,
    /// The pool is being dropped: the workers end.
    stop: bool,
}

/// What the caller and the workers share.
struct Shared {
    state: Mutex<State>,
    /// [`State::generation`], readable without the lock while yielding.
    generation: AtomicU64,
    started: Condvar,
    /// Workers still in the current run.
    remaining: AtomicUsize,
    /// Guards the caller's sleep on `finished` (the last worker notifies under it).
    done: Mutex<()>,
    finished: Condvar,
}

/// Persistent worker threads (see the module docs).
pub(crate) struct WorkerPool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// Whether the caller yields for a run's end before it sleeps ([`caller_spin`]).
    caller_yields: bool,
    /// How long the last run took (zero before the first).
    last_run: Duration,
}

impl WorkerPool {
    /// Starts `workers` threads named `iterstore-worker-<w>`; waits yield before they
    /// sleep if `yield_waits` ([`crate::Config::yield_waits`]).
    pub(crate) fn start(workers: usize, yield_waits: bool) -> Result<Self> {
        let worker_spin = if yield_waits {
            WORKER_SPIN
        } else {
            Duration::ZERO
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                generation: 0,
                job: None,
                stop: false,
            }),
            generation: AtomicU64::new(0),
            started: Condvar::new(),
            remaining: AtomicUsize::new(0),
            done: Mutex::new(()),
            finished: Condvar::new(),
        });
        let mut pool = WorkerPool {
            shared,
            threads: Vec::with_capacity(workers),
            caller_yields: yield_waits,
            last_run: Duration::ZERO,
        };
        for w in 0..workers {
            let shared = pool.shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("iterstore-worker-{w}"))
                .spawn(move || work(&shared, w, worker_spin))
                .map_err(|e| Error::failed("worker threads", e))?;
            pool.threads.push(thread);
        }
        Ok(pool)
    }

    /// Binds worker thread `w` to the processing units `pus[w]` (when given), then reads
    /// back every thread's CPU affinity, which is returned in worker order. The error
    /// names the worker and the CPUs it could not be bound to.
    pub(crate) fn pin(&mut self, pus: Option<&[Vec<u32>]>) -> Result<Vec<Vec<u32>>> {
        let inputs = (0..self.threads.len())
            .map(|w| pus.map(|p| p[w].clone()))
            .collect();
        let read = self.on_each(inputs, |w, pus: Option<Vec<u32>>| -> Result<Vec<u32>> {
            if let Some(pus) = &pus {
                bind_current_thread(pus)
                    .map_err(|e| Error::failed(format!("binding worker {w} to CPUs {pus:?}"), e))?;
            }
            current_affinity().map_err(|e| Error::failed(format!("worker {w} affinity"), e))
        });
        read.into_iter()
            .enumerate()
            .map(|(w, r)| {
                r.unwrap_or_else(|_| {
                    Err(Error::failed(
                        format!("worker {w}"),
                        "panicked while pinning",
                    ))
                })
            })
            .collect()
    }

    /// Runs `f(w, inputs[w])` on worker thread `w` for every `w` (there must be one input
    /// per thread) and returns the results in worker order: `Err` with the panic payload
    /// for a worker whose closure panicked. `&mut self`: one run at a time (the threads
    /// share one job slot).
    pub(crate) fn on_each<I, R, F>(&mut self, inputs: Vec<I>, f: F) -> Vec<std::thread::Result<R>>
    where
        I: Send,
        R: Send,
        F: Fn(usize, I) -> R + Sync,
    {
        let n = self.threads.len();
        assert_eq!(inputs.len(), n, "one input per worker");
        let inputs: Vec<Mutex<Option<I>>> =
            inputs.into_iter().map(|i| Mutex::new(Some(i))).collect();
        let outputs: Vec<Mutex<Option<std::thread::Result<R>>>> =
            (0..n).map(|_| Mutex::new(None)).collect();
        let job = |w: usize| {
            let input = lock(&inputs[w])
                .take()
                .expect("each thread takes its own input once");
            let out = catch_unwind(AssertUnwindSafe(|| f(w, input)));
            *lock(&outputs[w]) = Some(out);
        };
        let job: &Job<'_> = &job;
        // SAFETY: the job borrows `inputs`, `outputs` and `f` from this frame. Workers
        // only call it between the generation bump below and their decrement of
        // `remaining`. The `Published` guard made before the job is shared waits, when it
        // is dropped (on return or on unwind alike), until `remaining` is 0 and then takes
        // the job back out of the shared state, so no worker uses it after this frame
        // ends. `&mut self` keeps any other run from replacing the job meanwhile.
        let job: &'static Job<'static> =
            unsafe { std::mem::transmute::<&Job<'_>, &'static Job<'static>>(job) };
        let s = &*self.shared;
        s.remaining.store(n, Ordering::Release);
        let published = Published(s);
        {
            let mut state = lock(&s.state);
            state.job = Some(job);
            state.generation += 1;
            s.generation.store(state.generation, Ordering::Release);
        }
        s.started.notify_all();
        // Wait for every worker: yield first, then sleep.
        let started = Instant::now();
        let spin_until = started + caller_spin(self.last_run);
        while self.caller_yields
            && s.remaining.load(Ordering::Acquire) != 0
            && Instant::now() < spin_until
        {
            std::thread::yield_now();
        }
        drop(published);
        self.last_run = started.elapsed();
        outputs
            .into_iter()
            .map(|o| {
                o.into_inner()
                    .unwrap_or_else(PoisonError::into_inner)
                    .expect("every worker ran its part")
            })
            .collect()
    }
}

/// A run's job while it is in the shared state: dropping this waits until every worker
/// is done with the job and takes it back out, so the frame that lent the job (see
/// [`WorkerPool::on_each`]) outlives every use of it, even when that frame unwinds.
struct Published<'a>(&'a Shared);

impl Drop for Published<'_> {
    fn drop(&mut self) {
        let s = self.0;
        let mut done = lock(&s.done);
        while s.remaining.load(Ordering::Acquire) != 0 {
            done = s
                .finished
                .wait(done)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(done);
        lock(&s.state).job = None;
    }
}

/// Worker thread `w`: runs each run's job once, until the pool stops; yields for `spin`
/// before it sleeps for the next run.
fn work(s: &Shared, w: usize, spin: Duration) {
    let mut seen = 0;
    loop {
        // The next run: yield for it first, then sleep.
        let spin_until = Instant::now() + spin;
        while !spin.is_zero()
            && s.generation.load(Ordering::Acquire) == seen
            && Instant::now() < spin_until
        {
            std::thread::yield_now();
        }
        let job = {
            let mut state = lock(&s.state);
            while state.generation == seen && !state.stop {
                state = s
                    .started
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.stop {
                return;
            }
            seen = state.generation;
            state
                .job
                .expect("a run publishes its job with its generation")
        };
        // The job catches the closure's panics itself.
        job(w);
        if s.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _done = lock(&s.done);
            s.finished.notify_all();
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        {
            let mut state = lock(&self.shared.state);
            state.stop = true;
            state.generation += 1;
            self.shared
                .generation
                .store(state.generation, Ordering::Release);
        }
        self.shared.started.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caller_yields_through_a_run_as_long_as_the_last_short_one() {
        let ms = Duration::from_millis;
        assert_eq!(caller_spin(Duration::ZERO), CALLER_SPIN);
        assert_eq!(caller_spin(ms(3)), ms(3) * 3 / 2 + ms(1));
        assert_eq!(
            caller_spin(CALLER_SPIN_MAX),
            CALLER_SPIN_MAX * 3 / 2 + ms(1)
        );
        assert_eq!(caller_spin(CALLER_SPIN_MAX + ms(1)), CALLER_SPIN);
        // The pool keeps how long its last run took.
        let mut pool = WorkerPool::start(2, true).unwrap();
        pool.on_each(vec![(), ()], |_, ()| std::thread::sleep(ms(5)));
        assert!(pool.last_run >= ms(5), "{:?}", pool.last_run);
    }

    #[test]
    fn threads_persist_across_runs_and_panics_stay_in_their_worker() {
        let mut pool = WorkerPool::start(3, true).unwrap();
        let ids = |pool: &mut WorkerPool| {
            pool.on_each(vec![(); 3], |w, ()| (w, std::thread::current().id()))
                .into_iter()
                .map(|r| r.unwrap())
                .collect::<Vec<_>>()
        };
        let first = ids(&mut pool);
        assert_eq!(
            first,
            ids(&mut pool),
            "the same thread serves each worker every time"
        );
        let names = pool.on_each(vec![(); 3], |_, ()| {
            std::thread::current().name().map(str::to_string)
        });
        let names: Vec<_> = names.into_iter().map(|n| n.unwrap().unwrap()).collect();
        assert_eq!(
            names,
            [
                "iterstore-worker-0",
                "iterstore-worker-1",
                "iterstore-worker-2"
            ]
        );
        let mut borrowed = vec![0u32; 3];
        let out = pool.on_each(borrowed.iter_mut().collect(), |w, slot: &mut u32| {
            if w == 1 {
                panic!("worker 1 fails");
            }
            *slot = w as u32 + 10;
        });
        assert!(out[0].is_ok() && out[1].is_err() && out[2].is_ok());
        assert_eq!(borrowed, vec![10, 0, 12]);
        assert_eq!(first, ids(&mut pool), "a panic does not lose the thread");
    }

    #[test]
    fn runs_after_the_workers_slept_still_start_and_finish() {
        for yield_waits in [true, false] {
            runs_after_a_pause(WorkerPool::start(2, yield_waits).unwrap());
        }
    }

    fn runs_after_a_pause(mut pool: WorkerPool) {
        for pause in [0, 3, 0, 5] {
            // Past both spins: every worker and the caller have gone to sleep.
            std::thread::sleep(Duration::from_millis(pause));
            let out = pool.on_each(vec![1u64, 2], |w, x| {
                std::thread::sleep(Duration::from_millis(pause));
                x * 10 + w as u64
            });
            let out: Vec<u64> = out.into_iter().map(|r| r.unwrap()).collect();
            assert_eq!(out, [10, 21]);
        }
        drop(pool); // joins the threads: a lost stop would hang here
    }
}
