//! [`WorkerPool`]: the cluster's worker threads, created once with the cluster and alive
//! across runs, so that a thread's pinning to a core and the memory it first touched
//! (its blocks, its per-thread copies) survive from one run to the next.
//!
//! A run hands worker `w` its input and runs the same closure on every thread; the call
//! returns when every thread has finished, whatever happened (a closure that panics is
//! caught and reported as that worker's result). The threads are rayon's, driven only
//! through `broadcast` (one call per thread), never through work stealing. This module
//! knows nothing of the store: no `Worker`, no messages.

use crate::topology::bind::{bind_current_thread, current_affinity};
use crate::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, PoisonError};

/// Persistent worker threads (see the module docs).
pub(crate) struct WorkerPool {
    pool: rayon::ThreadPool,
}

impl WorkerPool {
    /// Starts `workers` threads named `iterstore-worker-<w>`.
    pub(crate) fn start(workers: usize) -> Result<Self> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .thread_name(|w| format!("iterstore-worker-{w}"))
            .build()
            .map_err(|e| Error::failed("worker threads", e))?;
        Ok(WorkerPool { pool })
    }

    /// Binds worker thread `w` to the processing units `pus[w]` (when given), then reads
    /// back every thread's CPU affinity, which is returned in worker order. The error
    /// names the worker and the CPUs it could not be bound to.
    pub(crate) fn pin(&self, pus: Option<&[Vec<u32>]>) -> Result<Vec<Vec<u32>>> {
        let inputs = (0..self.pool.current_num_threads())
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
    /// for a worker whose closure panicked.
    pub(crate) fn on_each<I, R, F>(&self, inputs: Vec<I>, f: F) -> Vec<std::thread::Result<R>>
    where
        I: Send,
        R: Send,
        F: Fn(usize, I) -> R + Sync,
    {
        assert_eq!(
            inputs.len(),
            self.pool.current_num_threads(),
            "one input per worker"
        );
        let inputs: Vec<Mutex<Option<I>>> =
            inputs.into_iter().map(|i| Mutex::new(Some(i))).collect();
        self.pool.broadcast(|ctx| {
            let w = ctx.index();
            let input = inputs[w]
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .expect("each thread takes its own input once");
            catch_unwind(AssertUnwindSafe(|| f(w, input)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_persist_across_runs_and_panics_stay_in_their_worker() {
        let pool = WorkerPool::start(3).unwrap();
        let ids = |pool: &WorkerPool| {
            pool.on_each(vec![(); 3], |w, ()| (w, std::thread::current().id()))
                .into_iter()
                .map(|r| r.unwrap())
                .collect::<Vec<_>>()
        };
        let first = ids(&pool);
        assert_eq!(
            first,
            ids(&pool),
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
        assert_eq!(first, ids(&pool), "a panic does not lose the thread");
    }
}
